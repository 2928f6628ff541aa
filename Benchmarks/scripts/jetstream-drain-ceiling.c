/* The plain cnats ceiling of JetStream into one instance: what the NATS client and server alone allow on this
   machine for the work NATSThroughputTests' "token messages stored in JetStream, drained by one instance" measures
   Herald doing. No Herald, no JSON decoding, no store.

   1. Publishes COUNT messages asynchronously (js_PublishAsync, up to 4,096 awaiting their acknowledgement) to a
      stream of its own made as Herald makes its token stream (work-queue retention, file storage), each body distinct
      and as long as Herald's test's, and waits for every acknowledgement.
   2. Drains them with a durable consumer acknowledging each message (AckPolicy explicit, as Herald's token consumer):
      `pull`, natsSubscription_Fetch in batches of BATCH; or `push`, a synchronous push subscription (flow control
      and idle heartbeats on, as Herald's) read with natsSubscription_NextMsg. Timed from the subscription's creation
      to the last acknowledgement flushed to the server.

       cc -O2 -o jetstream-drain-ceiling jetstream-drain-ceiling.c -lnats
       jetstream-drain-ceiling URL COUNT [pull|push] [BATCH]

   Prints one line: RESULT publish=<acknowledged publishes/s> drain=<messages/s> mode=<pull|push> count=<COUNT>
   cpu_us=<this process's CPU per message, publish and drain together> drain_cpu_us=<the drain's alone>. Exits 1 on
   any failure. */
#include <nats/nats.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static double nowSeconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static double cpuSeconds(void) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return (double)usage.ru_utime.tv_sec + (double)usage.ru_utime.tv_usec / 1e6 + (double)usage.ru_stime.tv_sec
        + (double)usage.ru_stime.tv_usec / 1e6;
}

static void check(natsStatus status, jsErrCode code, const char *what) {
    if (status == NATS_OK) return;
    fprintf(stderr, "jetstream-drain-ceiling: %s: %s (JetStream error %d)\n", what, natsStatus_GetText(status), (int)code);
    nats_PrintLastErrorStack(stderr);
    exit(1);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: jetstream-drain-ceiling URL COUNT [pull|push] [BATCH]\n");
        return 2;
    }
    const char *url = argv[1];
    long count = atol(argv[2]);
    int push = argc > 3 && strcmp(argv[3], "push") == 0;
    int batch = argc > 4 ? atoi(argv[4]) : 256;
    if (count <= 0 || batch <= 0) return 2;

    char stream[64], subject[64];
    snprintf(stream, sizeof stream, "CEILING_%d", (int)getpid());
    snprintf(subject, sizeof subject, "ceiling.%d.token", (int)getpid());

    natsConnection *connection = NULL;
    jsCtx *js = NULL;
    jsErrCode code = 0;
    check(natsConnection_ConnectTo(&connection, url), 0, "connect");
    jsOptions jsOptions;
    jsOptions_Init(&jsOptions);
    jsOptions.PublishAsync.MaxPending = 4096;
    check(natsConnection_JetStream(&js, connection, &jsOptions), 0, "JetStream context");

    jsStreamConfig config;
    jsStreamConfig_Init(&config);
    config.Name = stream;
    const char *subjects[] = {subject};
    config.Subjects = subjects;
    config.SubjectsLen = 1;
    config.Retention = js_WorkQueuePolicy;
    config.Storage = js_FileStorage;
    check(js_AddStream(NULL, js, &config, NULL, &code), code, "add stream");

    // Bodies as long as Herald's test's (an FCM v1 send of a notification and a data entry), each distinct.
    char body[512];
    double cpuStart = cpuSeconds();
    double start = nowSeconds();
    for (long n = 0; n < count; n++) {
        int length = snprintf(
            body, sizeof body,
            "{\"message\":{\"token\":\"e5Q0UKDuXi0xj1_k3ui2Hg:-PZdognC2cPJAqfEs-iDtBNM-ASbrs19lossIU7-hQI\","
            "\"notification\":{\"title\":\"Portugal vs. Denmark\",\"body\":\"great match!\"},"
            "\"data\":{\"n\":\"%ld\"}}}",
            n);
        check(js_PublishAsync(js, subject, body, length, NULL), 0, "publish");
    }
    jsPubOptions complete;
    jsPubOptions_Init(&complete);
    complete.MaxWait = 60000;
    check(js_PublishAsyncComplete(js, &complete), 0, "publish acknowledgements");
    double published = nowSeconds();

    natsSubscription *subscription = NULL;
    jsSubOptions subscribe;
    jsSubOptions_Init(&subscribe);
    subscribe.Stream = stream;
    subscribe.Config.AckPolicy = js_AckExplicit;
    subscribe.Config.MaxAckPending = 4096;
    long drained = 0;
    double drainCPUStart = cpuSeconds();
    double drainStart = nowSeconds();
    if (push) {
        subscribe.Config.FlowControl = true;
        subscribe.Config.Heartbeat = 5000000000LL;
        check(js_SubscribeSync(&subscription, js, subject, &jsOptions, &subscribe, &code), code, "push subscribe");
        while (drained < count) {
            natsMsg *message = NULL;
            check(natsSubscription_NextMsg(&message, subscription, 10000), 0, "next message");
            check(natsMsg_Ack(message, &jsOptions), 0, "ack");
            natsMsg_Destroy(message);
            drained++;
        }
    } else {
        check(js_PullSubscribe(&subscription, js, subject, "drain", &jsOptions, &subscribe, &code), code, "pull subscribe");
        while (drained < count) {
            natsMsgList list = {0};
            long want = count - drained < batch ? count - drained : batch;
            check(natsSubscription_Fetch(&list, subscription, (int)want, 10000, &code), code, "fetch");
            for (int i = 0; i < list.Count; i++) check(natsMsg_Ack(list.Msgs[i], &jsOptions), 0, "ack");
            drained += list.Count;
            natsMsgList_Destroy(&list);
        }
    }
    check(natsConnection_Flush(connection), 0, "flush");
    double end = nowSeconds();
    double cpu = cpuSeconds() - cpuStart;
    double drainCPU = cpuSeconds() - drainCPUStart;

    natsSubscription_Unsubscribe(subscription);
    natsSubscription_Destroy(subscription);
    js_DeleteStream(js, stream, NULL, NULL);
    printf(
        "RESULT publish=%.0f drain=%.0f mode=%s count=%ld cpu_us=%.2f drain_cpu_us=%.2f\n", (double)count / (published - start),
        (double)count / (end - drainStart), push ? "push" : "pull", count, cpu * 1e6 / (double)count, drainCPU * 1e6 / (double)count);
    jsCtx_Destroy(js);
    natsConnection_Destroy(connection);
    return 0;
}
