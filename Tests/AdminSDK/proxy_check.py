"""An app server as Firebase's documentation writes it, unchanged, sending through Herald's FCM proxy.

Run by HeraldCommandTests' AdminSDKProxyTests against `herald serve --fcm-proxy`:

    HTTPS_PROXY=http://127.0.0.1:PORT REQUESTS_CA_BUNDLE=CA SSL_CERT_FILE=CA \
        .build-python/bin/python Tests/AdminSDK/proxy_check.py --credentials service-account.json --token T

No attribute of the SDK is touched: the service-account file is the one `herald credentials create` wrote, the
access token comes from Herald's /token (google-auth's JWT-bearer grant to https://oauth2.googleapis.com/token),
and every request goes to Google's hosts through the proxy in HTTPS_PROXY, which is Herald. Every message that
should be delivered carries data {"check": <name>}; the script prints `delivered: [...]` last, and exits 0 when
every check passed, 1 otherwise.

send_each_async is checked only with --no-proxy, the set-up without a proxy: the SDK's asynchronous client mounts
its own httpx transports, and httpx then ignores HTTPS_PROXY. There Google's three hosts resolve to Herald through
the hosts file (the test bind-mounts its own over /etc/hosts in a private mount namespace), and Herald serves
HTTPS on port 443 with the certificate its CA issued for them. The script then prints `async HTTP versions: [...]`,
what the asynchronous calls' answers came over (HTTP/2, which ALPN agreed): httpx.AsyncClient.send is wrapped to
record each answer's http_version (http_versions.py, shared with admin_sdk_check.py), and passes requests and answers
through unchanged.
"""

import argparse
import asyncio
import json
import sys
import traceback

import firebase_admin
from firebase_admin import credentials, exceptions, messaging


# The HTTP versions the asynchronous calls spoke (every httpx.AsyncClient request is recorded from here on).
from http_versions import async_versions


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--credentials", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--expect-refused", action="store_true",
                        help="the key was revoked: the send must fail for want of an access token")
    parser.add_argument("--gateway", action="store_true",
                        help="Herald is a gateway (which passes sends and topic management on to the fleet)")
    parser.add_argument("--no-proxy", action="store_true",
                        help="no proxy: Google's hosts resolve to Herald (/etc/hosts); send_each_async is checked too")
    arguments = parser.parse_args()
    token = arguments.token

    # As in https://firebase.google.com/docs/admin/setup and /docs/cloud-messaging/send-message.
    cred = credentials.Certificate(arguments.credentials)
    firebase_admin.initialize_app(cred)

    if arguments.expect_refused:
        try:
            messaging.send(messaging.Message(token=token, data={"check": "revoked"}))
        except Exception as error:  # noqa: BLE001 - google-auth's RefreshError, as the SDK lets it through
            print(f"refused: {type(error).__name__}: {error}")
            return 0 if "invalid_grant" in str(error) else 1
        print("FAILED: a revoked key still sends")
        return 1

    delivered = []
    failures = []

    def check(name, function):
        try:
            function()
            print(f"ok: {name}")
        except Exception:  # noqa: BLE001 - every failure is reported, then the next check runs
            failures.append(name)
            print(f"FAILED: {name}\n{traceback.format_exc()}")

    def expect(condition, what):
        if not condition:
            raise AssertionError(what)

    def send():
        name = messaging.send(messaging.Message(token=token, data={"check": "send"}))
        expect(name.startswith("projects/"), name)
        delivered.append("send")

    def send_notification():
        message = messaging.Message(
            token=token,
            notification=messaging.Notification(title="Build finished", body="8121 passed"),
            data={"check": "send-notification"},
        )
        messaging.send(message)
        delivered.append("send-notification")

    def send_each():
        response = messaging.send_each([
            messaging.Message(token=token, data={"check": "send-each-1"}),
            messaging.Message(token=token, data={"check": "send-each-2"}),
            messaging.Message(token="not-a-registered-token", data={"check": "never"}),
        ])
        expect(response.success_count == 2, f"success count {response.success_count}")
        expect(isinstance(response.responses[2].exception, messaging.UnregisteredError), repr(response.responses[2].exception))
        delivered.extend(["send-each-1", "send-each-2"])

    def multicast():
        response = messaging.send_each_for_multicast(
            messaging.MulticastMessage(tokens=[token, "not-a-registered-token"], data={"check": "multicast"}))
        expect(response.success_count == 1, f"success count {response.success_count}")
        delivered.append("multicast")

    def topics():
        # Unsubscribed before anything is sent: through a gateway, a message still on its way to the instance when it
        # unsubscribes may be dropped there (as FCM may drop it), so nothing is sent to a topic being left.
        for topic in ["news", "left"]:
            response = messaging.subscribe_to_topic([token], topic)
            expect(response.success_count == 1 and response.failure_count == 0, f"subscribe: {response.errors!r}")
        response = messaging.unsubscribe_from_topic([token], "left")
        expect(response.success_count == 1, f"unsubscribe: {response.errors!r}")
        messaging.send(messaging.Message(topic="news", data={"check": "topic-news"}))
        delivered.append("topic-news")

    def send_each_async():
        async def run():
            return await messaging.send_each_async([messaging.Message(token=token, data={"check": "send-each-async"})])
        response = asyncio.run(run())
        expect(response.success_count == 1, f"async: {response.responses[0].exception!r}")
        delivered.append("send-each-async")

    def unknown_token():
        try:
            messaging.send(messaging.Message(token="not-a-registered-token"))
        except messaging.UnregisteredError:
            return
        raise AssertionError("expected messaging.UnregisteredError")

    def bad_argument():
        # Passes the SDK's own validation, so the server has to refuse it.
        try:
            messaging.send(messaging.Message(token=token, data={"from": "a reserved key"}))
        except exceptions.InvalidArgumentError as error:
            expect(error.http_response.status_code == 400, f"HTTP {error.http_response.status_code}")
            return
        raise AssertionError("expected exceptions.InvalidArgumentError")

    checks = [
        ("messaging.send", send),
        ("messaging.send with a notification", send_notification),
        ("messaging.send_each", send_each),
        ("messaging.send_each_for_multicast", multicast),
        ("an unknown token -> messaging.UnregisteredError", unknown_token),
        ("a bad argument is refused", bad_argument),
    ]
    checks.append(("subscribe_to_topic, send to the topic, unsubscribe_from_topic", topics))
    if arguments.no_proxy:
        checks.append(("messaging.send_each_async (httpx, HTTP/2)", send_each_async))
    for name, function in checks:
        check(name, function)

    if arguments.no_proxy:
        print("async HTTP versions: " + json.dumps(sorted(async_versions)))
    print("delivered: " + json.dumps(sorted(delivered)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
