"""An independent NATS client (nats-py) as a sender to Herald's NATS receiver (Tests/HeraldNATSReceiverTests).

Publishes a token message through JetStream (and checks the stream stored it), makes a core NATS request with a
topic message (and checks the FCM answer), a request with a malformed body (and checks the FCM error), and a
plain core publish. Prints what it saw; exits 1 on the first difference from what Herald documents.
"""
import argparse
import asyncio
import json
import sys

import nats


def body(target_key, target, n):
    return json.dumps({"message": {target_key: target, "data": {"n": n}}}).encode()


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--project", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--topic", required=True)
    args = parser.parse_args()
    token_subject = f"herald.{args.project}.token.{args.token}"
    topic_subject = f"herald.{args.project}.topic.{args.topic}"

    nc = await nats.connect(args.url)
    try:
        js = nc.jetstream()
        ack = await js.publish(token_subject, body("token", args.token, "py-1"))
        print("jetstream ack:", ack.stream, ack.seq)
        if ack.stream != "HERALD_" + args.project.upper():
            print("unexpected stream", ack.stream)
            return 1

        reply = json.loads((await nc.request(topic_subject, body("topic", args.topic, "py-2"), timeout=5)).data)
        print("request answer:", reply)
        if not reply.get("name", "").startswith(f"projects/{args.project}/messages/"):
            return 1

        reply = json.loads((await nc.request(topic_subject, b"{\"message\": ", timeout=5)).data)
        print("malformed answer:", reply)
        if reply.get("error", {}).get("status") != "INVALID_ARGUMENT":
            return 1

        await nc.publish(topic_subject, body("topic", args.topic, "py-3"))
        await nc.flush()
        return 0
    finally:
        await nc.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
