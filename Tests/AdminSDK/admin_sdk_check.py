"""Drives a running Herald HTTP receiver with the real Firebase Admin SDK for Python (PyPI firebase-admin).

Run by HeraldHTTPReceiverTests' AdminSDKTests with the venv scripts/python-env makes:

    .build-python/bin/python Tests/AdminSDK/admin_sdk_check.py --url http://127.0.0.1:PORT \
        --secret S --token T --fid F --project P

or with --url https://127.0.0.1:PORT and the test CA in SSL_CERT_FILE (httpx, the async calls) and
REQUESTS_CA_BUNDLE (requests, the others), as an operator trusts a private CA.

The SDK is used as an app server uses it; only its service URLs are pointed at Herald, and its credential is a
static one whose access token is Herald's bearer secret (no network, no service account). Every message that
should be delivered carries data {"check": <name>}; the Swift test compares the names its handlers saw with the
`delivered:` line this script prints last, after an `async HTTP versions:` line (what the asynchronous calls'
httpx client spoke: HTTP/2 over TLS, where ALPN offers it). Exit status 0 when every check passed, 1 otherwise.
"""

import argparse
import asyncio
import json
import os
import sys
import time
import traceback
import warnings

# Nothing may reach Google by accident: any https:// request goes to a proxy that refuses the connection.
# Herald's URL is on loopback and bypasses it.
os.environ["HTTPS_PROXY"] = os.environ["https_proxy"] = "http://127.0.0.1:9"
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"

try:
    import firebase_admin
    import google.auth.credentials
    import httpx
    from firebase_admin import credentials, exceptions, messaging
except ImportError as missing:
    sys.exit(f"{missing}: this Python has no firebase-admin; run scripts/python-env and use .build-python/bin/python")

# The HTTP versions the asynchronous calls spoke (every httpx.AsyncClient request is recorded from here on).
from http_versions import async_versions


class StaticAccessToken(google.auth.credentials.Credentials):
    """A Google credential whose access token is fixed: Herald's bearer secret. Refreshing changes nothing."""

    def __init__(self, token):
        super().__init__()
        self.token = token
        self.expiry = None

    def refresh(self, request):
        pass


class HeraldSecret(credentials.Base):
    """A firebase_admin credential that sends `Authorization: Bearer <secret>` and never fetches a token."""

    def __init__(self, secret):
        super().__init__()
        self._credential = StaticAccessToken(secret)

    def get_credential(self):
        return self._credential


def point_at_herald(app, url, project):
    """Points the app's messaging service at Herald: the FCM v1 send URL, the FCM v1 topic management URL and
    the Instance ID URL the legacy topic calls use. Fails loudly when the SDK no longer has them, rather than
    letting a newer SDK talk to Google."""
    service = messaging._get_messaging_service(app)
    expected = {
        "_fcm_url": f"https://fcm.googleapis.com/v1/projects/{project}/messages:send",
        "_fcm_topic_url": f"https://fcm.googleapis.com/v1/projects/{project}/registrations",
    }
    for attribute, google_url in expected.items():
        found = getattr(service, attribute, None)
        if found != google_url:
            raise RuntimeError(f"firebase-admin changed: _MessagingService.{attribute} is {found!r}, not {google_url!r}")
    service._fcm_url = f"{url}/v1/projects/{project}/messages:send"
    service._fcm_topic_url = f"{url}/v1/projects/{project}/registrations"
    # The Instance ID URL is a class attribute: one for every app.
    if getattr(messaging._MessagingService, "IID_URL", None) not in ("https://iid.googleapis.com", url):
        raise RuntimeError("firebase-admin changed: _MessagingService.IID_URL is not https://iid.googleapis.com")
    messaging._MessagingService.IID_URL = url


def checker(failures):
    """`check(name, function)`: runs one check, prints ok / FAILED with the time it took, and collects failures."""
    def check(name, function):
        started = time.monotonic()
        try:
            function()
            print(f"ok      {name} ({(time.monotonic() - started) * 1000:.0f} ms)")
        except Exception as error:  # noqa: BLE001 -- every failure is reported, then the next check runs
            failures.append(name)
            print(f"FAILED  {name}: {type(error).__name__}: {error}")
            traceback.print_exc(file=sys.stdout)
    return check


def expect(condition, what):
    if not condition:
        raise AssertionError(what)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ["url", "secret", "token", "fid", "project"]:
        parser.add_argument(f"--{name}", required=True)
    args = parser.parse_args()
    warnings.simplefilter("ignore", DeprecationWarning)  # Message.token and the *_legacy calls are deprecated

    def app(name, project=args.project, secret=args.secret):
        created = firebase_admin.initialize_app(HeraldSecret(secret), {"projectId": project, "httpTimeout": 10}, name=name)
        point_at_herald(created, args.url, project)
        return created

    herald = app("herald")
    other_project_app = app("other-project", project="someone-elses-project")
    wrong_secret_app = app("wrong-secret", secret="not-the-secret")
    # The asynchronous calls share one event loop, as in an app server (httpx keeps its connections on it).
    event_loop = asyncio.new_event_loop()

    failures = []
    delivered = []

    check = checker(failures)

    def expect_error(function, error_class, also=None):
        try:
            function()
        except error_class as error:
            if also is not None:
                expect(isinstance(error, also), f"{type(error).__name__} is not also a {also.__name__}")
            return error
        except Exception as error:  # noqa: BLE001
            raise AssertionError(f"expected {error_class.__name__}, got {type(error).__name__}: {error}") from error
        raise AssertionError(f"expected {error_class.__name__}, but the call succeeded")

    def expect_name(name):
        expect(isinstance(name, str) and name.startswith(f"projects/{args.project}/messages/"), f"message name {name!r}")

    def data(check_name):
        return {"check": check_name}

    # Sends, each target style, delivered.
    def send_with_token():
        expect_name(messaging.send(messaging.Message(token=args.token, data=data("send-token")), app=herald))
        delivered.append("send-token")

    def send_with_fid():
        expect_name(messaging.send(messaging.Message(fid=args.fid, data=data("send-fid")), app=herald))
        delivered.append("send-fid")

    def send_everything():
        # A message as app servers write them: notification, data, Android, APNs headers and payload, web push and
        # an analytics label. Herald reads what concerns an Apple-style app and accepts the rest.
        message = messaging.Message(
            fid=args.fid,
            notification=messaging.Notification(title="Build finished", body="All green"),
            data={**data("send-everything"), "build": "8121"},
            android=messaging.AndroidConfig(priority="high", ttl=3600, collapse_key="builds"),
            apns=messaging.APNSConfig(
                headers={"apns-priority": "10", "apns-collapse-id": "builds"},
                payload=messaging.APNSPayload(
                    aps=messaging.Aps(badge=3, sound="default", thread_id="builds", category="BUILD", mutable_content=True),
                    custom="value",
                ),
                fcm_options=messaging.APNSFCMOptions(analytics_label="builds-apns"),
            ),
            webpush=messaging.WebpushConfig(headers={"Urgency": "high"}),
            fcm_options=messaging.FCMOptions(analytics_label="builds"),
        )
        expect_name(messaging.send(message, app=herald))
        delivered.append("send-everything")

    def dry_run():
        expect_name(messaging.send(messaging.Message(fid=args.fid, data=data("dry-run")), dry_run=True, app=herald))

    def send_each():
        response = messaging.send_each([
            messaging.Message(token=args.token, data=data("send-each-token")),
            messaging.Message(fid=args.fid, data=data("send-each-fid")),
            messaging.Message(token="not-this-instance", data=data("send-each-wrong")),
        ], app=herald)
        expect((response.success_count, response.failure_count) == (2, 1), f"counts {response.success_count}/{response.failure_count}")
        expect(all(r.success for r in response.responses[:2]), "the first two succeed")
        expect(isinstance(response.responses[2].exception, messaging.UnregisteredError), f"third: {response.responses[2].exception!r}")
        delivered.extend(["send-each-token", "send-each-fid"])

    def send_each_for_multicast():
        response = messaging.send_each_for_multicast(
            messaging.MulticastMessage(fids=[args.fid, "not-this-fid"], data=data("multicast")), app=herald)
        expect((response.success_count, response.failure_count) == (1, 1), f"counts {response.success_count}/{response.failure_count}")
        expect(isinstance(response.responses[1].exception, messaging.UnregisteredError), f"second: {response.responses[1].exception!r}")
        delivered.append("multicast")

    def send_each_async():
        # The asynchronous calls use httpx, not requests: a second HTTP client against the same endpoint.
        response = event_loop.run_until_complete(messaging.send_each_async([
            messaging.Message(fid=args.fid, data=data("send-each-async")),
            messaging.Message(fid="not-this-fid", data=data("send-each-async-wrong")),
        ], app=herald))
        expect((response.success_count, response.failure_count) == (1, 1), f"counts {response.success_count}/{response.failure_count}")
        expect(isinstance(response.responses[1].exception, messaging.UnregisteredError), f"second: {response.responses[1].exception!r}")
        delivered.append("send-each-async")

    # Topic management: FCM v1 (subscribe_to_topic), Instance ID (the *_legacy calls), asynchronous (httpx).
    def topic_result(response, successes, errors):
        got = (response.success_count, [(e.index, e.reason) for e in response.errors])
        expect(got == (successes, errors), f"topic result {got}, expected {(successes, errors)}")

    def subscribe():
        topic_result(messaging.subscribe_to_topic(args.token, "weather", app=herald), 1, [])
        topic_result(messaging.subscribe_to_topic(args.token, "/topics/weather", app=herald), 1, [])  # again: still fine
        topic_result(messaging.subscribe_to_topic([args.token, "not-this-instance"], "news", app=herald), 1, [(1, "UNREGISTERED")])

    def subscribe_legacy():
        topic_result(messaging.subscribe_to_topic_legacy([args.token, "not-this-instance"], "sports", app=herald), 1, [(1, "NOT_FOUND")])

    def subscribe_async():
        topic_result(event_loop.run_until_complete(messaging.subscribe_to_topic_async(args.token, "alerts", app=herald)), 1, [])

    def send_to_topics():
        expect_name(messaging.send(messaging.Message(topic="weather", data=data("topic-weather")), app=herald))
        expect_name(messaging.send(messaging.Message(topic="/topics/sports", data=data("topic-sports")), app=herald))
        expect_name(messaging.send(messaging.Message(
            condition="'weather' in topics && ('sports' in topics || 'cats' in topics)", data=data("condition")), app=herald))
        # Accepted and dropped, as FCM accepts a topic send with no subscriber.
        expect_name(messaging.send(messaging.Message(topic="nobody-listens", data=data("topic-unsubscribed")), app=herald))
        delivered.extend(["topic-weather", "topic-sports", "condition"])

    def unsubscribe():
        topic_result(messaging.unsubscribe_from_topic(args.token, "weather", app=herald), 1, [])
        topic_result(messaging.unsubscribe_from_topic(args.token, "never-subscribed", app=herald), 1, [])
        topic_result(messaging.unsubscribe_from_topic_legacy([args.token, "not-this-instance"], "sports", app=herald), 1, [(1, "NOT_FOUND")])
        topic_result(event_loop.run_until_complete(messaging.unsubscribe_from_topic_async(args.token, "alerts", app=herald)), 1, [])
        topic_result(messaging.unsubscribe_from_topic(args.token, "news", app=herald), 1, [])
        topic_result(messaging.subscribe_to_topic(args.token, "kept", app=herald), 1, [])  # the Swift test sees ["kept"]

    def unsubscribed_topic_is_not_delivered():
        expect_name(messaging.send(messaging.Message(topic="weather", data=data("topic-after-unsubscribe")), app=herald))

    # The SDK's error classes.
    def wrong_token():
        error = expect_error(lambda: messaging.send(messaging.Message(token="not-this-instance", data=data("x")), app=herald),
                             messaging.UnregisteredError, also=exceptions.NotFoundError)
        expect(error.http_response.status_code == 404, f"HTTP {error.http_response.status_code}")

    def wrong_fid():
        expect_error(lambda: messaging.send(messaging.Message(fid="not-this-fid", data=data("x")), app=herald),
                     messaging.UnregisteredError)

    def bad_payloads():
        # Each passes the SDK's own validation, so the server has to refuse it.
        for message in [
            messaging.Message(fid=args.fid, data={"from": "a reserved key"}),
            messaging.Message(fid=args.fid, data={"google.reserved": "a reserved prefix"}),
            messaging.Message(topic="weather", data={"big": "x" * 3000}),  # over 2048 bytes for a topic message
            messaging.Message(condition="'a' in topics && 'b' in topics && 'c' in topics && 'd' in topics && "
                                        "'e' in topics && 'f' in topics", data=data("x")),  # six topics, five allowed
            messaging.Message(fid=args.fid, apns=messaging.APNSConfig(headers={"apns-priority": "7"})),
        ]:
            error = expect_error(lambda: messaging.send(message, app=herald), exceptions.InvalidArgumentError)
            expect(type(error) is exceptions.InvalidArgumentError, f"{type(error).__name__} is a messaging-specific error")
            expect(error.http_response.status_code == 400, f"HTTP {error.http_response.status_code}")
            print(f"        refused: {error}")

    def wrong_project():
        error = expect_error(lambda: messaging.send(messaging.Message(fid=args.fid, data=data("x")), app=other_project_app),
                             messaging.SenderIdMismatchError, also=exceptions.PermissionDeniedError)
        expect(error.http_response.status_code == 403, f"HTTP {error.http_response.status_code}")
        topic_result(messaging.subscribe_to_topic(args.token, "weather", app=other_project_app), 0, [(0, "SENDER_ID_MISMATCH")])

    def wrong_secret():
        expect_error(lambda: messaging.send(messaging.Message(fid=args.fid, data=data("x")), app=wrong_secret_app),
                     exceptions.UnauthenticatedError)
        topic_result(messaging.subscribe_to_topic(args.token, "weather", app=wrong_secret_app), 0, [(0, "UNAUTHENTICATED")])

    checks = [
        ("send with token (deprecated)", send_with_token),
        ("send with fid", send_with_fid),
        ("send with notification, data, android, apns, webpush, fcm_options", send_everything),
        ("send dry_run (validate_only) is not delivered", dry_run),
        ("send_each", send_each),
        ("send_each_for_multicast with fids", send_each_for_multicast),
        ("send_each_async (httpx)", send_each_async),
        ("subscribe_to_topic (FCM v1 topic management)", subscribe),
        ("subscribe_to_topic_legacy (Instance ID batchAdd)", subscribe_legacy),
        ("subscribe_to_topic_async (httpx)", subscribe_async),
        ("send to topics and a condition", send_to_topics),
        ("unsubscribe_from_topic, _legacy (batchRemove) and _async", unsubscribe),
        ("a topic unsubscribed from is not delivered", unsubscribed_topic_is_not_delivered),
        ("wrong token -> messaging.UnregisteredError", wrong_token),
        ("wrong fid -> messaging.UnregisteredError", wrong_fid),
        ("bad payloads -> exceptions.InvalidArgumentError", bad_payloads),
        ("wrong project -> messaging.SenderIdMismatchError", wrong_project),
        ("wrong secret -> exceptions.UnauthenticatedError", wrong_secret),
    ]
    for name, function in checks:
        check(name, function)
    event_loop.close()

    version = firebase_admin.__version__
    print(f"firebase-admin {version}: {len(failures)} of {len(checks)} checks failed" if failures
          else f"firebase-admin {version}: all {len(checks)} checks passed")
    print("async HTTP versions: " + json.dumps(sorted(async_versions)))
    print("delivered: " + json.dumps(sorted(delivered)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
