"""APNs certificate-based authentication against a Herald receiver that requires client certificates, as a provider
does it: httpx over HTTP/2 (ALPN `h2`) with the provider certificate as its TLS client certificate and no
`authorization` header (Tests/HeraldCommandTests APNsCertificateTests against `herald serve --tls-client-ca`, and
Tests/HeraldHTTPReceiverTests APNsProviderCertificateTests in process, which adds --retired-token).

Certificates: --multi, a certificate naming several topics (its subject UID and Apple's topics extension); --single,
one naming its subject's UID only; --plain, a client certificate of the same CA that names no topic (not a provider
certificate). Each answer must have come over HTTP/2. Prints one line per check; exits 1 when any differs from what
APNs answers.
"""
import argparse
import json
import ssl
import sys
import uuid

import httpx

TOPIC = "com.example.weather"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--ca-file", required=True)
    parser.add_argument("--device-token", required=True)
    parser.add_argument("--multi", nargs=2, metavar=("CERT", "KEY"), required=True)
    parser.add_argument("--single", nargs=2, metavar=("CERT", "KEY"), required=True)
    parser.add_argument("--plain", nargs=2, metavar=("CERT", "KEY"), required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--retired-token", help="a token of the instance that it no longer has: 410 Unregistered")
    parser.add_argument("--retired-after", type=int, help="the earliest the retired token's timestamp may be (ms)")
    parser.add_argument("--retired-before", type=int, help="the latest the retired token's timestamp may be (ms)")
    args = parser.parse_args()
    failures = []

    def check(name, response, status, reason=None):
        problems = []
        if response.http_version != "HTTP/2":
            problems.append(f"{response.http_version}, expected HTTP/2")
        if response.status_code != status:
            problems.append(f"status {response.status_code}, expected {status}")
        try:
            uuid.UUID(response.headers.get("apns-id") or "")
        except ValueError:
            problems.append(f"apns-id {response.headers.get('apns-id')!r} is not a UUID")
        body = None
        if reason is None:
            if response.content:
                problems.append(f"a body on success: {response.text!r}")
        else:
            try:
                body = response.json()
            except json.JSONDecodeError:
                body = {}
            if body.get("reason") != reason:
                problems.append(f"reason {body.get('reason')!r}, expected {reason!r} (body {response.text!r})")
        print(f"{'ok  ' if not problems else 'FAIL'} {name}: {response.status_code} {response.text}")
        if problems:
            failures.append(f"{name}: {'; '.join(problems)}")
        return body

    def client(certificate):
        context = ssl.create_default_context(cafile=args.ca_file)
        context.load_cert_chain(certificate[0], certificate[1])
        return httpx.Client(base_url=args.url, timeout=10, http1=False, http2=True, verify=context)

    def push(session, topic=TOPIC, authorization=None, device=args.device_token):
        headers = {"apns-push-type": "alert", "apns-priority": "10"}
        if topic is not None:
            headers["apns-topic"] = topic
        if authorization is not None:
            headers["authorization"] = authorization
        payload = {"aps": {"alert": {"title": "Storm", "body": "Take cover"}}}
        return session.post(f"/3/device/{device}", content=json.dumps(payload), headers=headers)

    with client(args.multi) as multi:
        check("several topics: the app's", push(multi), 200)
        check("several topics: its VoIP topic", push(multi, topic=f"{TOPIC}.voip"), 200)
        check("several topics: another app's", push(multi, topic="com.example.other"), 400, "TopicDisallowed")
        check("several topics: no apns-topic", push(multi, topic=None), 400, "MissingTopic")
        check("several topics: a bearer token is ignored", push(multi, authorization="bearer not.a.jwt"), 200)
        check("several topics: another device", push(multi, device="someone-else"), 400, "BadDeviceToken")
        if args.retired_token is not None:
            body = check("several topics: a token the instance no longer has", push(multi, device=args.retired_token),
                         410, "Unregistered")
            timestamp = (body or {}).get("timestamp")
            if not isinstance(timestamp, int) or not args.retired_after <= timestamp <= args.retired_before:
                failures.append(f"410 timestamp {timestamp!r}, expected an integer in "
                                f"[{args.retired_after}, {args.retired_before}]")
    with client(args.single) as single:
        check("one topic: no apns-topic (the subject's)", push(single, topic=None), 200)
        check("one topic: its own", push(single), 200)
        check("one topic: a topic it does not name", push(single, topic=f"{TOPIC}.voip"), 400, "TopicDisallowed")
    with client(args.plain) as plain:
        check("no provider certificate, no token", push(plain), 403, "MissingProviderToken")
        check("no provider certificate, a token no key verifies", push(plain, authorization="bearer not.a.jwt"), 403,
              "InvalidProviderToken")
        check("no provider certificate, the bearer secret", push(plain, authorization=f"bearer {args.secret}"), 200)

    if failures:
        print("\n".join(failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
