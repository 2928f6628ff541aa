"""Drives a Herald gateway (`herald serve --gateway`) with the real Firebase Admin SDK for Python: the app server's
one endpoint, which passes each send on to the fleet's instances through NATS.

Run by HeraldNATSReceiverTests' GatewayTests with the venv scripts/python-env makes:

    .build-python/bin/python Tests/AdminSDK/gateway_check.py --url http://127.0.0.1:PORT --secret S \
        --project P --token-a A --token-b B --fid-a F

Instance A is subscribed to the topics `news` and `all`, instance B to `all` only. Every message that should be
delivered carries data {"check": <name>}; the Swift test compares what each instance handled with the
`delivered-a:` and `delivered-b:` lines printed last. Exit status 0 when every check passed, 1 otherwise.
"""

import argparse
import json
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from admin_sdk_check import HeraldSecret, checker, expect, point_at_herald  # noqa: E402 -- the credential, URLs and checks, shared

import firebase_admin  # noqa: E402
from firebase_admin import exceptions, messaging  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ["url", "secret", "project", "token-a", "token-b", "fid-a"]:
        parser.add_argument(f"--{name}", required=True)
    args = parser.parse_args()
    warnings.simplefilter("ignore", DeprecationWarning)

    app = firebase_admin.initialize_app(HeraldSecret(args.secret), {"projectId": args.project, "httpTimeout": 10}, name="gateway")
    point_at_herald(app, args.url, args.project)

    failures = []
    delivered = {"a": [], "b": []}

    check = checker(failures)

    def expect_error(function, error_class):
        try:
            function()
        except error_class as error:
            return error
        except Exception as error:  # noqa: BLE001
            raise AssertionError(f"expected {error_class.__name__}, got {type(error).__name__}: {error}") from error
        raise AssertionError(f"expected {error_class.__name__}, but the call succeeded")

    def send(message, **options):
        name = messaging.send(message, app=app, **options)
        expect(isinstance(name, str) and name.startswith(f"projects/{args.project}/messages/"), f"message name {name!r}")
        return name

    def token_a():
        name = send(messaging.Message(token=args.token_a, data={"check": "token-a"}))
        # Stored by JetStream: the name carries the ID the instance gives the message.
        expect("/messages/nats-" in name, f"a stored message's name: {name!r}")
        delivered["a"].append("token-a")

    def token_b():
        send(messaging.Message(token=args.token_b, data={"check": "token-b"}))
        delivered["b"].append("token-b")

    def fid_a():
        send(messaging.Message(fid=args.fid_a, data={"check": "fid-a"}))
        delivered["a"].append("fid-a")

    def topic_news():
        send(messaging.Message(topic="news", data={"check": "topic-news"}))
        delivered["a"].append("topic-news")

    def topic_all():
        send(messaging.Message(topic="all", data={"check": "topic-all"}))
        delivered["a"].append("topic-all")
        delivered["b"].append("topic-all")

    def send_each():
        response = messaging.send_each([
            messaging.Message(token=args.token_a, data={"check": "each-a"}),
            messaging.Message(token=args.token_b, data={"check": "each-b"}),
            messaging.Message(token="unknown-installation:nobody", data={"check": "each-unknown"}),
        ], app=app)
        expect(response.success_count == 2, f"send_each successes: {response.success_count}")
        expect(isinstance(response.responses[2].exception, messaging.UnregisteredError), f"third: {response.responses[2].exception!r}")
        delivered["a"].append("each-a")
        delivered["b"].append("each-b")

    def unknown_token():
        expect_error(lambda: send(messaging.Message(token="unknown-installation:nobody", data={"check": "never"})), messaging.UnregisteredError)

    def rotated_away_token():
        # The installation is known, but with another token: that token is no longer valid.
        installation = args.token_a.split(":", 1)[0]
        expect_error(lambda: send(messaging.Message(token=f"{installation}:stale", data={"check": "never"})), messaging.UnregisteredError)

    def condition():
        expect_error(lambda: send(messaging.Message(condition="'news' in topics", data={"check": "never"})), exceptions.InvalidArgumentError)

    def dry_run():
        send(messaging.Message(token=args.token_a, data={"check": "dry-run"}), dry_run=True)
        expect_error(lambda: send(messaging.Message(token="unknown-installation:nobody"), dry_run=True), messaging.UnregisteredError)

    def topic_management():
        # subscribe_to_topic (FCM v1's topicSubscriptions, one request per token) through the gateway: each token's
        # change made by its instance; the unknown token is reported per token. The instance has subscribed before it
        # answers, so a send after the answer reaches it; an unsubscription is made before any send to that topic (a
        # message still on its way to an instance when it unsubscribes may be dropped there, as FCM may drop it).
        response = messaging.subscribe_to_topic([args.token_a, args.token_b, "unknown-installation:nobody"], "gw", app=app)
        expect(response.success_count == 2 and response.failure_count == 1, f"subscribe: {[(e.index, e.reason) for e in response.errors]}")
        expect(response.errors[0].index == 2, f"subscribe: the failure is the unknown token's: {response.errors[0].index}")
        response = messaging.subscribe_to_topic([args.token_a, args.token_b], "gw-2", app=app)
        expect(response.success_count == 2, f"subscribe: {[(e.index, e.reason) for e in response.errors]}")
        response = messaging.unsubscribe_from_topic([args.token_b], "gw-2", app=app)
        expect(response.success_count == 1 and response.failure_count == 0, f"unsubscribe: {[(e.index, e.reason) for e in response.errors]}")
        send(messaging.Message(topic="gw", data={"check": "topic-gw"}))
        delivered["a"].append("topic-gw")
        delivered["b"].append("topic-gw")
        send(messaging.Message(topic="gw-2", data={"check": "topic-gw-2"}))
        delivered["a"].append("topic-gw-2")

    def topic_management_legacy():
        # The Instance ID API's batchAdd and batchRemove (the *_legacy calls, and older SDKs' subscribeToTopic).
        response = messaging.subscribe_to_topic_legacy([args.token_a, "unknown-installation:nobody", args.token_b], "legacy", app=app)
        expect(response.success_count == 2 and response.failure_count == 1, f"batchAdd: {[(e.index, e.reason) for e in response.errors]}")
        expect(response.errors[0].index == 1, f"batchAdd: the failure is the unknown token's: {response.errors[0].index}")
        expect(response.errors[0].reason == "NOT_FOUND", f"batchAdd: {response.errors[0].reason}")
        response = messaging.unsubscribe_from_topic_legacy([args.token_b], "legacy", app=app)
        expect(response.success_count == 1 and response.failure_count == 0, f"batchRemove: {[(e.index, e.reason) for e in response.errors]}")
        send(messaging.Message(topic="legacy", data={"check": "topic-legacy"}))
        delivered["a"].append("topic-legacy")

    for name, function in [
        ("token-a", token_a), ("token-b", token_b), ("fid-a", fid_a), ("topic-news", topic_news), ("topic-all", topic_all),
        ("send-each", send_each), ("unknown-token", unknown_token), ("rotated-away-token", rotated_away_token),
        ("condition", condition), ("dry-run", dry_run), ("topic-management", topic_management),
        ("topic-management-legacy", topic_management_legacy),
    ]:
        check(name, function)

    print("delivered-a: " + json.dumps(sorted(delivered["a"])))
    print("delivered-b: " + json.dumps(sorted(delivered["b"])))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
