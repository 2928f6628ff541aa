#ifndef HERALD_CNATS_H
#define HERALD_CNATS_H

/* The NATS C client (cnats, Debian's libnats-dev) and the few helpers Herald needs to run a connection on its
   libuv loop: an event-loop adapter of Herald's own (adapter.c, which says why not cnats's) and JetStream set-up. */
#include <nats/nats.h>
#include <uv.h>
#include <stdint.h>

/* One connection's place on a loop: the loop, and the adapter's per-connection state once attached (so the
   owner can tell when the adapter's handles have all closed). */
typedef struct herald_nats_loop herald_nats_loop;

/* A place on `loop`, NULL when out of memory; free it with herald_nats_loop_free once the connection is
   destroyed and herald_nats_open_adapter_handles says 0. */
herald_nats_loop *herald_nats_loop_create(uv_loop_t *loop);
void herald_nats_loop_free(herald_nats_loop *place);

/* Makes `opts` run the connection on `place->loop` through the adapter. Call on the loop thread (the calling
   thread is recorded as the loop's), and connect there too: the first attach creates the adapter's handles. */
natsStatus herald_nats_use_loop(natsOptions *opts, herald_nats_loop *place);

/* Handles the adapter still has open on the loop for this connection (0 once it has fully detached, or when it
   never attached). Call on the loop thread. */
int herald_nats_open_adapter_handles(herald_nats_loop *place);

/* cnats callbacks that forward to a Swift object (`closure` is an unretained pointer to it). */
typedef void (*herald_nats_message_fn)(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure);
typedef void (*herald_nats_connection_fn)(natsConnection *nc, void *closure);

/* Exponential reconnect backoff: `base` doubled per attempt (from the first), capped at `cap` (milliseconds),
   with up to 20 % random jitter. `closure` points to two int64_t: base and cap. */
int64_t herald_nats_reconnect_delay(natsConnection *nc, int attempts, void *closure);

/* JetStream set-up, kept in C where cnats's configuration structs are plain to fill in. Each blocks on a request
   to the server: call them off the loop thread (the loop must keep reading for the answer to arrive). On failure
   `*errorCode` holds JetStream's error code when the server gave one (0 otherwise). */

/* Creates the stream `name` on `subject` (work-queue retention, file storage) unless it exists; an existing
   stream is left as it is. Ages and windows in nanoseconds; limits of -1 mean none. */
natsStatus herald_nats_ensure_stream(jsCtx *js, const char *name, const char *subject, int64_t maxAge,
                                     int64_t maxMessages, int64_t maxBytes, int64_t duplicateWindow,
                                     jsErrCode *errorCode);

/* Creates the durable push consumer `durable` on `stream`, filtered on `filter`, delivering to `deliverSubject`
   with explicit acks. An existing consumer with another filter (the token rotated) is deleted first; one with
   this filter is kept (with its unacknowledged messages). Ack wait in nanoseconds; maxDeliver -1 for no limit. */
natsStatus herald_nats_ensure_consumer(jsCtx *js, const char *stream, const char *durable, const char *filter,
                                       const char *deliverSubject, int64_t ackWait, int64_t maxAckPending,
                                       int64_t maxDeliver, jsErrCode *errorCode);

/* Deletes the durable consumer `durable` of `stream`; a consumer that does not exist is not an error. */
natsStatus herald_nats_delete_consumer(jsCtx *js, const char *stream, const char *durable, jsErrCode *errorCode);

/* Subscribes to the existing durable consumer `durable` of `stream` with manual acks; messages go to `callback`
   on cnats's delivery thread for the subscription. */
natsStatus herald_nats_subscribe_durable(natsSubscription **subscription, jsCtx *js, const char *stream,
                                         const char *durable, const char *filter, natsMsgHandler callback,
                                         void *closure, jsErrCode *errorCode);

/* Publishes `data` to `subject` through JetStream and waits for the stream's acknowledgement; `messageID`
   (optional) is the Nats-Msg-Id header JetStream de-duplicates on. `*sequence` gets the stream sequence and
   `stream` (of `streamCapacity` bytes, NUL-terminated) the name of the stream that stored it. */
natsStatus herald_nats_publish_stored(jsCtx *js, const char *subject, const void *data, int length,
                                      const char *messageID, int64_t timeout, uint64_t *sequence,
                                      char *stream, size_t streamCapacity, jsErrCode *errorCode);

/* Messages `stream` holds now, in `*count`. */
natsStatus herald_nats_stream_messages(jsCtx *js, const char *stream, uint64_t *count, jsErrCode *errorCode);

/* Writes `token` as the value of `key` in the key-value bucket `bucket` (created when missing, file storage, one
   revision kept), or deletes `key` when `token` is NULL. */
natsStatus herald_nats_put_registration(jsCtx *js, const char *bucket, const char *key, const char *token,
                                        jsErrCode *errorCode);

/* Reads `key` of the key-value bucket `bucket` into `token` (`capacity` bytes, NUL-terminated); `*found` is false
   when the key (or the bucket) does not exist or was deleted. */
natsStatus herald_nats_get_registration(jsCtx *js, const char *bucket, const char *key, char *token, size_t capacity,
                                        bool *found);

/* The last error cnats recorded on the calling thread, or its status text. Never NULL. */
const char *herald_nats_last_error(natsStatus status);

#endif
