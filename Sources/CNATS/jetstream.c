/* JetStream set-up for NATSReceiver and `herald send --nats`: streams, durable consumers, stored publishes. */
#include <stdio.h>
#include <string.h>
#include "CNATS.h"

natsStatus herald_nats_ensure_stream(jsCtx *js, const char *name, const char *subject, bool workQueue,
                                     int64_t maxAge, int64_t maxMessages, int64_t maxBytes, int64_t duplicateWindow,
                                     int64_t replicas, jsErrCode *errorCode) {
    jsStreamInfo *info = NULL;
    *errorCode = 0;
    natsStatus status = js_GetStreamInfo(&info, js, name, NULL, errorCode);
    if (status == NATS_OK) {
        jsStreamInfo_Destroy(info);
        return NATS_OK;
    }
    if (status != NATS_NOT_FOUND && *errorCode != JSStreamNotFoundErr) return status;
    jsStreamConfig config;
    jsStreamConfig_Init(&config);
    const char *subjects[1] = { subject };
    config.Name = name;
    config.Subjects = subjects;
    config.SubjectsLen = 1;
    config.Retention = workQueue ? js_WorkQueuePolicy : js_LimitsPolicy;
    config.Replicas = replicas;
    config.Storage = js_FileStorage;
    config.MaxAge = maxAge;
    config.MaxMsgs = maxMessages;
    config.MaxBytes = maxBytes;
    config.Duplicates = duplicateWindow;
    *errorCode = 0;
    status = js_AddStream(&info, js, &config, NULL, errorCode);
    if (status == NATS_OK) jsStreamInfo_Destroy(info);
    /* Another process (an instance, a gateway) may have created it meanwhile: the server then answers that the name
       is in use, or, when the two configurations differ, that the subjects overlap an existing stream (10065). Either
       way the stream is there now, which is what was asked. */
    if (status != NATS_OK) {
        jsStreamInfo *existing = NULL;
        jsErrCode again = 0;
        if (*errorCode == JSStreamNameExistErr || js_GetStreamInfo(&existing, js, name, NULL, &again) == NATS_OK) {
            if (existing != NULL) jsStreamInfo_Destroy(existing);
            *errorCode = 0;
            status = NATS_OK;
        }
    }
    return status;
}

natsStatus herald_nats_ensure_consumer(jsCtx *js, const char *stream, const char *durable, const char *filter,
                                       const char *deliverSubject, bool deliverNew, bool ackAll, int64_t ackWait,
                                       int64_t maxAckPending, int64_t maxDeliver,
                                       herald_nats_consumer_state *state, jsErrCode *errorCode) {
    jsConsumerInfo *info = NULL;
    *errorCode = 0;
    memset(state, 0, sizeof *state);
    state->acksAll = ackAll;
    natsStatus status = js_GetConsumerInfo(&info, js, stream, durable, NULL, errorCode);
    if (status == NATS_OK) {
        bool same = info->Config != NULL && info->Config->FilterSubject != NULL
            && strcmp(info->Config->FilterSubject, filter) == 0
            && info->Config->DeliverSubject != NULL && strcmp(info->Config->DeliverSubject, deliverSubject) == 0;
        /* Kept with the ack policy it was made with (it cannot be changed in place, and deleting it would lose what
           waits for it): the caller acknowledges as that policy wants. */
        if (same) {
            state->acksAll = info->Config->AckPolicy == js_AckAll;
            state->delivered = info->Delivered.Consumer;
            state->deliveredStream = info->Delivered.Stream;
            state->ackFloorStream = info->AckFloor.Stream;
            state->pending = info->NumAckPending;
        }
        jsConsumerInfo_Destroy(info);
        info = NULL;
        if (same) return NATS_OK;
        status = herald_nats_delete_consumer(js, stream, durable, errorCode);
        if (status != NATS_OK) return status;
    } else if (status != NATS_NOT_FOUND && *errorCode != JSConsumerNotFoundErr) {
        return status;
    }
    jsConsumerConfig config;
    jsConsumerConfig_Init(&config);
    config.Durable = durable;
    config.FilterSubject = filter;
    config.DeliverSubject = deliverSubject;
    config.DeliverPolicy = deliverNew ? js_DeliverNew : js_DeliverAll;
    config.AckPolicy = ackAll ? js_AckAll : js_AckExplicit;
    config.AckWait = ackWait;
    config.MaxAckPending = maxAckPending;
    config.MaxDeliver = maxDeliver;
    *errorCode = 0;
    status = js_AddConsumer(&info, js, stream, &config, NULL, errorCode);
    if (status == NATS_OK) jsConsumerInfo_Destroy(info);
    return status;
}

natsStatus herald_nats_delete_consumer(jsCtx *js, const char *stream, const char *durable, jsErrCode *errorCode) {
    *errorCode = 0;
    natsStatus status = js_DeleteConsumer(js, stream, durable, NULL, errorCode);
    if (status == NATS_NOT_FOUND || *errorCode == JSConsumerNotFoundErr) return NATS_OK;
    return status;
}

natsStatus herald_nats_subscribe_durable(natsSubscription **subscription, jsCtx *js, const char *stream,
                                         const char *durable, const char *filter, natsMsgHandler callback,
                                         void *closure, jsErrCode *errorCode) {
    jsSubOptions options;
    jsSubOptions_Init(&options);
    options.Stream = stream;
    options.Consumer = durable;
    options.ManualAck = true;
    *errorCode = 0;
    if (callback == NULL) return js_SubscribeSync(subscription, js, filter, NULL, &options, errorCode);
    return js_Subscribe(subscription, js, filter, callback, closure, NULL, &options, errorCode);
}

natsStatus herald_nats_publish_stored(jsCtx *js, const char *subject, const void *data, int length,
                                      const char *messageID, int64_t timeout, uint64_t *sequence,
                                      char *stream, size_t streamCapacity, jsErrCode *errorCode) {
    jsPubOptions options;
    jsPubOptions_Init(&options);
    options.MaxWait = timeout;
    options.MsgId = messageID;
    jsPubAck *ack = NULL;
    *errorCode = 0;
    natsStatus status = js_Publish(&ack, js, subject, data, length, &options, errorCode);
    if (status == NATS_OK) {
        *sequence = ack->Sequence;
        if (streamCapacity > 0) {
            snprintf(stream, streamCapacity, "%s", ack->Stream != NULL ? ack->Stream : "");
        }
        jsPubAck_Destroy(ack);
    }
    return status;
}

const char *herald_nats_stored_message_id(natsMsg *message) {
    const char *value = NULL;
    if (natsMsgHeader_Get(message, "Nats-Msg-Id", &value) != NATS_OK) return NULL;
    return value;
}

/* One decimal token of a reply subject, from `*cursor` up to the next '.' or the end; false when it is empty or
   not a number. Moves `*cursor` past the token and its dot. */
static bool herald_nats_number(const char **cursor, const char *end, uint64_t *value) {
    const char *p = *cursor;
    uint64_t result = 0;
    if (p >= end || *p == '.') return false;
    for (; p < end && *p != '.'; p++) {
        if (*p < '0' || *p > '9') return false;
        uint64_t digit = (uint64_t)(*p - '0');
        if (result > (UINT64_MAX - digit) / 10) return false;
        result = result * 10 + digit;
    }
    *value = result;
    *cursor = p < end ? p + 1 : p;
    return true;
}

bool herald_nats_delivery_parse(const char *reply, herald_nats_delivery *delivery) {
    static const char prefix[] = "$JS.ACK.";
    const size_t prefixLength = sizeof(prefix) - 1;
    if (reply == NULL || strncmp(reply, prefix, prefixLength) != 0) return false;
    const char *start = reply + prefixLength;
    const char *end = start + strlen(start);
    /* The tokens after the prefix: 7 (`<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>`)
       or, from nats-server 2.9 on, 9 or more (`<domain>.<account hash>.` before them, more tokens after). */
    const char *tokens[12];
    int count = 0;
    tokens[count++] = start;
    for (const char *p = start; p < end; p++) {
        if (*p == '.') {
            if (count == 12) break;
            tokens[count++] = p + 1;
        }
    }
    int first;
    if (count == 7) {
        first = 0;
    } else if (count >= 9) {
        first = 2;
    } else {
        return false;
    }
    const char *streamEnd = tokens[first + 1] - 1;
    if (streamEnd <= tokens[first]) return false;
    delivery->stream = tokens[first];
    delivery->streamLength = (size_t)(streamEnd - tokens[first]);
    const char *cursor = tokens[first + 2];
    uint64_t timestamp = 0;
    if (!herald_nats_number(&cursor, end, &delivery->delivered) || !herald_nats_number(&cursor, end, &delivery->streamSequence)
        || !herald_nats_number(&cursor, end, &delivery->consumerSequence) || !herald_nats_number(&cursor, end, &timestamp)
        || !herald_nats_number(&cursor, end, &delivery->pending))
        return false;
    if (timestamp > (uint64_t)INT64_MAX) return false;
    delivery->timestamp = (int64_t)timestamp;
    return true;
}

natsStatus herald_nats_stream_messages(jsCtx *js, const char *stream, uint64_t *count, jsErrCode *errorCode) {
    jsStreamInfo *info = NULL;
    *errorCode = 0;
    natsStatus status = js_GetStreamInfo(&info, js, stream, NULL, errorCode);
    if (status == NATS_OK) {
        *count = info->State.Msgs;
        jsStreamInfo_Destroy(info);
    }
    return status;
}

natsStatus herald_nats_put_registration(jsCtx *js, const char *bucket, const char *key, const char *token,
                                        int64_t replicas, jsErrCode *errorCode) {
    kvStore *kv = NULL;
    *errorCode = 0;
    natsStatus status = js_KeyValue(&kv, js, bucket);
    if (status == NATS_NOT_FOUND) {
        kvConfig config;
        kvConfig_Init(&config);
        config.Bucket = bucket;
        config.History = 1;
        config.StorageType = js_FileStorage;
        config.Replicas = (int)replicas;
        status = js_CreateKeyValue(&kv, js, &config);
    }
    if (status != NATS_OK) return status;
    if (token != NULL) {
        uint64_t revision = 0;
        status = kvStore_PutString(&revision, kv, key, token);
    } else {
        status = kvStore_Delete(kv, key);
    }
    kvStore_Destroy(kv);
    return status;
}

natsStatus herald_nats_get_registration(jsCtx *js, const char *bucket, const char *key, char *token, size_t capacity,
                                        bool *found) {
    kvStore *kv = NULL;
    *found = false;
    natsStatus status = js_KeyValue(&kv, js, bucket);
    if (status == NATS_NOT_FOUND) return NATS_OK;
    if (status != NATS_OK) return status;
    kvEntry *entry = NULL;
    status = kvStore_Get(&entry, kv, key);
    if (status == NATS_OK) {
        snprintf(token, capacity, "%s", kvEntry_ValueString(entry));
        *found = true;
        kvEntry_Destroy(entry);
    } else if (status == NATS_NOT_FOUND) {
        status = NATS_OK;
    }
    kvStore_Destroy(kv);
    return status;
}

const char *herald_nats_last_error(natsStatus status) {
    const char *failure = herald_nats_load_failure();
    if (failure != NULL) return failure;
    natsStatus last = NATS_OK;
    const char *text = nats_GetLastError(&last);
    if (text != NULL && text[0] != '\0') return text;
    return natsStatus_GetText(status);
}

natsStatus herald_nats_publish_message(natsConnection *nc, const char *subject, const char *reply, const void *data,
                                       int length, const char *messageID) {
    natsMsg *message = NULL;
    natsStatus status = natsMsg_Create(&message, subject, reply, (const char *)data, length);
    if (status == NATS_OK && messageID != NULL) status = natsMsgHeader_Set(message, "Nats-Msg-Id", messageID);
    if (status == NATS_OK) status = natsConnection_PublishMsg(nc, message);
    herald_nats_message_free(message);
    return status;
}

/* The value of `"key":` in the JSON object text[0..<length] at its top level, its first byte (after blanks); NULL
   when absent. Enough for JetStream's publish acknowledgements, flat objects whose only nested one is "error". */
static const char *json_member(const char *text, int length, const char *key) {
    size_t keyLength = strlen(key);
    int depth = 0;
    bool inString = false;
    for (int i = 0; i < length; i++) {
        char c = text[i];
        if (inString) {
            if (c == '\\') i++;
            else if (c == '"') inString = false;
            continue;
        }
        if (c == '{') depth++;
        else if (c == '}') depth--;
        else if (c == '"') {
            if (depth == 1 && i + 1 + (int)keyLength < length && memcmp(text + i + 1, key, keyLength) == 0
                && text[i + 1 + keyLength] == '"') {
                int j = i + 2 + (int)keyLength;
                while (j < length && (text[j] == ' ' || text[j] == '\t' || text[j] == '\n' || text[j] == '\r')) j++;
                if (j < length && text[j] == ':') {
                    j++;
                    while (j < length && (text[j] == ' ' || text[j] == '\t' || text[j] == '\n' || text[j] == '\r')) j++;
                    return j < length ? text + j : NULL;
                }
            }
            inString = true;
        }
    }
    return NULL;
}

/* Copies the JSON string at `value` (its opening quote) into `out`, NUL-terminated, escapes kept as they are. */
static void json_copy_string(const char *value, const char *end, char *out, size_t capacity) {
    if (capacity == 0) return;
    size_t n = 0;
    if (value != NULL && value < end && *value == '"') {
        for (const char *p = value + 1; p < end && *p != '"' && n + 1 < capacity; p++) {
            if (*p == '\\' && p + 1 < end) p++;
            out[n++] = *p;
        }
    }
    out[n] = '\0';
}

static uint64_t json_number(const char *value, const char *end) {
    uint64_t number = 0;
    for (const char *p = value; p != NULL && p < end && *p >= '0' && *p <= '9'; p++) number = number * 10 + (uint64_t)(*p - '0');
    return number;
}

natsStatus herald_nats_read_pub_ack(natsMsg *reply, int prefixLength, uint64_t *number, uint64_t *sequence,
                                    char *stream, size_t streamCapacity, jsErrCode *errorCode, char *errorText,
                                    size_t errorCapacity) {
    *number = 0;
    *sequence = 0;
    *errorCode = 0;
    if (streamCapacity > 0) stream[0] = '\0';
    if (errorCapacity > 0) errorText[0] = '\0';
    const char *subject = natsMsg_GetSubject(reply);
    size_t subjectLength = subject != NULL ? strlen(subject) : 0;
    if ((int)subjectLength <= prefixLength) return NATS_INVALID_SUBJECT;
    for (const char *p = subject + prefixLength; *p != '\0'; p++) {
        if (*p < '0' || *p > '9') return NATS_INVALID_SUBJECT;
        *number = *number * 10 + (uint64_t)(*p - '0');
    }
    if (natsMsg_IsNoResponders(reply)) {
        snprintf(errorText, errorCapacity, "no stream takes the subject (no responders)");
        return NATS_NO_RESPONDERS;
    }
    const char *text = natsMsg_GetData(reply);
    int length = natsMsg_GetDataLength(reply);
    const char *end = text + length;
    const char *error = json_member(text, length, "error");
    if (error != NULL) {
        const char *errorEnd = end;
        int errorLength = (int)(errorEnd - error);
        const char *code = json_member(error, errorLength, "err_code");
        *errorCode = (jsErrCode)json_number(code, end);
        json_copy_string(json_member(error, errorLength, "description"), end, errorText, errorCapacity);
        return NATS_ERR;
    }
    const char *seq = json_member(text, length, "seq");
    const char *name = json_member(text, length, "stream");
    if (seq == NULL || name == NULL) {
        snprintf(errorText, errorCapacity, "not a JetStream acknowledgement: %.*s", length < 200 ? length : 200, text);
        return NATS_ERR;
    }
    *sequence = json_number(seq, end);
    json_copy_string(name, end, stream, streamCapacity);
    return NATS_OK;
}
