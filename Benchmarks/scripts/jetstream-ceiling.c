/* The plain cnats ceiling of a gateway's token sends: asynchronous JetStream publishes with acknowledgements, as
   many in flight at once as WINDOW (as a gateway has one per HTTP connection), to SUBJECT for SECONDS, each body
   distinct (so each is stored, none a duplicate) and each with a Nats-Msg-Id of its own, as the gateway sends them.
   No HTTP, no JSON decoding: what the NATS client and server alone allow on this machine. scripts/measure-gateway
   builds and runs it in the same run as the gateways:

       cc -O2 -o jetstream-ceiling jetstream-ceiling.c -lnats
       jetstream-ceiling URL SUBJECT SECONDS WINDOW [asap]

   With `asap`, each publish is written out at once (natsOptions_SetSendAsap, as the gateway's connection does)
   instead of after cnats's flusher thread has slept 1 ms to gather more.

   Prints one line: acknowledged publishes per second, the acknowledgement latency p50 / p99 (publish to ack
   callback), failures, and the CPU time of this process per publish. */
#include <nats/nats.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static int64_t *sentAt;
static int64_t *latencies;
static atomic_long acknowledged;
static atomic_long failed;
static long capacity;

static int64_t nowNanoseconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void onAck(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure) {
    (void)js;
    (void)closure;
    (void)pae;
    const char *id = NULL;
    if (pa != NULL && natsMsgHeader_Get(msg, "Nats-Msg-Id", &id) == NATS_OK && id != NULL) {
        long n = strtol(strchr(id, '-') + 1, NULL, 10);
        long index = atomic_fetch_add(&acknowledged, 1);
        if (n < capacity && index < capacity) latencies[index] = nowNanoseconds() - sentAt[n];
    } else {
        atomic_fetch_add(&failed, 1);
    }
    natsMsg_Destroy(msg);
}

static int compare(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: %s URL SUBJECT SECONDS WINDOW [asap]\n", argv[0]);
        return 2;
    }
    const char *url = argv[1], *subject = argv[2];
    double seconds = atof(argv[3]);
    int window = atoi(argv[4]);
    capacity = 20000000;
    sentAt = calloc(capacity, sizeof *sentAt);
    latencies = calloc(capacity, sizeof *latencies);
    natsConnection *nc = NULL;
    natsOptions *natsOptions = NULL;
    natsOptions_Create(&natsOptions);
    natsOptions_SetURL(natsOptions, url);
    if (argc == 6 && strcmp(argv[5], "asap") == 0) natsOptions_SetSendAsap(natsOptions, true);
    if (natsConnection_Connect(&nc, natsOptions) != NATS_OK) {
        fprintf(stderr, "cannot connect to %s: %s\n", url, nats_GetLastError(NULL));
        return 1;
    }
    jsOptions options;
    jsOptions_Init(&options);
    options.PublishAsync.MaxPending = window;
    options.PublishAsync.AckHandler = onAck;
    options.PublishAsync.StallWait = 10000;
    jsCtx *js = NULL;
    if (natsConnection_JetStream(&js, nc, &options) != NATS_OK) {
        fprintf(stderr, "no JetStream context: %s\n", nats_GetLastError(NULL));
        return 1;
    }
    char body[256], id[64];
    int pid = (int)getpid();
    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    int64_t start = nowNanoseconds(), end = start + (int64_t)(seconds * 1e9);
    long sent = 0;
    while (sent < capacity && (sent % 256 != 0 || nowNanoseconds() < end)) {
        int length = snprintf(body, sizeof body, "{\"message\": {\"token\": \"ceiling\", \"data\": {\"k\": \"v\", \"n\": \"%d-%ld\"}}}",
                              pid, sent);
        snprintf(id, sizeof id, "c%d-%ld", pid, sent);
        natsMsg *msg = NULL;
        natsMsg_Create(&msg, subject, NULL, body, length);
        natsMsgHeader_Set(msg, "Nats-Msg-Id", id);
        sentAt[sent] = nowNanoseconds();
        natsStatus status = js_PublishMsgAsync(js, &msg, NULL);
        natsMsg_Destroy(msg);
        if (status != NATS_OK) {
            atomic_fetch_add(&failed, 1);
            continue;
        }
        sent++;
    }
    jsPubOptions wait;
    jsPubOptions_Init(&wait);
    wait.MaxWait = 30000;
    js_PublishAsyncComplete(js, &wait);
    double elapsed = (nowNanoseconds() - start) / 1e9;
    getrusage(RUSAGE_SELF, &after);
    double cpu = (after.ru_utime.tv_sec - before.ru_utime.tv_sec) + (after.ru_stime.tv_sec - before.ru_stime.tv_sec)
        + ((after.ru_utime.tv_usec - before.ru_utime.tv_usec) + (after.ru_stime.tv_usec - before.ru_stime.tv_usec)) / 1e6;
    long count = atomic_load(&acknowledged);
    long measured = count < capacity ? count : capacity;
    qsort(latencies, measured, sizeof *latencies, compare);
    double p50 = measured ? latencies[measured / 2] / 1e6 : 0, p99 = measured ? latencies[measured * 99 / 100] / 1e6 : 0;
    printf("acknowledged %ld of %ld in %.2f s: %.0f publishes/s, ack latency p50 %.2f ms, p99 %.2f ms, failed %ld, "
           "CPU %.1f us per publish (this process)\n",
           count, sent, elapsed, count / elapsed, p50, p99, atomic_load(&failed), count ? cpu * 1e6 / count : 0.0);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    return count == sent ? 0 : 1;
}
