"""APNs token-based authentication against a running `herald serve`, as a provider does it: httpx posts to
POST /3/device/{token} with `authorization: bearer <JWT>`, the JWT made by PyJWT (ES256, `kid` header, `iss` and
`iat` claims) with the .p8 key the daemon was given (Tests/HeraldCommandTests, APNsTokenTests). With an https URL
and --ca-file, over HTTP/2 (ALPN `h2`, as APNs providers speak), each answer checked to have come over HTTP/2.

Every reason Herald implements for what a provider sends is exercised: a good token (and the bearer secret)
accepted with `apns-id` and `apns-unique-id`; MissingProviderToken, ExpiredProviderToken and InvalidProviderToken
(another key, an unknown key ID, another team, HS256, a token from the future, not a JWT) with 403, `{"reason": ...}`
and `apns-id`; BadDeviceToken, MethodNotAllowed, PayloadEmpty, PayloadTooLarge, BadMessageId, InvalidPushType,
BadPriority, BadExpirationDate, BadCollapseId and MalformedPayload for a request's own faults. (The reasons of the
daemon's state — TooManyRequests, Shutdown, ServiceUnavailable — and of certificates have tests of their own.) Prints one
line per check; exits 1 when any differs from what APNs answers.
"""
import argparse
import json
import ssl
import sys
import time
import uuid

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import ec


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--device-token", required=True)
    parser.add_argument("--key", required=True, help="the .p8 file")
    parser.add_argument("--key-id", required=True)
    parser.add_argument("--team-id", required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--ca-file", help="the CA of the daemon's certificate: HTTP/2 over TLS")
    args = parser.parse_args()
    over_tls = args.ca_file is not None
    with open(args.key) as file:
        p8 = file.read()
    stranger = ec.generate_private_key(ec.SECP256R1())

    def token(kid=args.key_id, iss=args.team_id, iat=None, key=p8, algorithm="ES256"):
        claims = {"iss": iss, "iat": int(time.time()) if iat is None else iat}
        return jwt.encode(claims, key, algorithm=algorithm, headers={"kid": kid})

    failures = []

    def check(name, response, status, reason=None, apns_id=None):
        problems = []
        if over_tls and response.http_version != "HTTP/2":
            problems.append(f"{response.http_version}, expected HTTP/2")
        if response.status_code != status:
            problems.append(f"status {response.status_code}, expected {status}")
        got_id = response.headers.get("apns-id")
        try:
            uuid.UUID(got_id or "")
        except ValueError:
            problems.append(f"apns-id {got_id!r} is not a UUID")
        if apns_id is not None and got_id != apns_id:
            problems.append(f"apns-id {got_id!r}, expected {apns_id!r}")
        if reason is None:
            if response.content:
                problems.append(f"a body on success: {response.text!r}")
            try:
                uuid.UUID(response.headers.get("apns-unique-id") or "")
            except ValueError:
                problems.append("no apns-unique-id UUID on success")
        else:
            try:
                got_reason = response.json().get("reason")
            except json.JSONDecodeError:
                got_reason = None
            if got_reason != reason:
                problems.append(f"reason {got_reason!r}, expected {reason!r} (body {response.text!r})")
        print(f"{'ok  ' if not problems else 'FAIL'} {name}: {response.status_code} {response.text}")
        if problems:
            failures.append(f"{name}: {'; '.join(problems)}")

    tls = {"http1": False, "http2": True, "verify": ssl.create_default_context(cafile=args.ca_file)} if over_tls else {}
    with httpx.Client(base_url=args.url, timeout=10, **tls) as client:

        def push(authorization, apns_id=None, device=args.device_token, extra=None, body=None, method="POST"):
            headers = {"apns-topic": "com.example.weather", "apns-push-type": "alert", "apns-priority": "10"}
            if authorization is not None:
                headers["authorization"] = authorization
            if apns_id is not None:
                headers["apns-id"] = apns_id
            headers.update(extra or {})
            payload = {"aps": {"alert": {"title": "Storm", "body": "Take cover"}}, "n": 1}
            content = json.dumps(payload) if body is None else body
            return client.request(method, f"/3/device/{device}", content=content, headers=headers)

        given = str(uuid.uuid4())
        check("a good token, with apns-id", push(f"bearer {token()}", apns_id=given), 200, apns_id=given)
        check("the same token again (remembered)", push(f"bearer {token()}"), 200)
        check("the scheme in capitals", push(f"Bearer {token()}"), 200)
        check("the bearer secret", push(f"bearer {args.secret}"), 200)
        check("no authorization", push(None, apns_id=given), 403, "MissingProviderToken", apns_id=given)
        check("a bearer without a token", push("bearer"), 403, "MissingProviderToken")
        check("another scheme", push(f"Basic {args.secret}"), 403, "MissingProviderToken")
        check("issued 61 minutes ago", push(f"bearer {token(iat=int(time.time()) - 3660)}"), 403, "ExpiredProviderToken")
        # now - iat would overflow a 64-bit integer: refused, and the daemon answers what follows.
        check("issued at the smallest 64-bit integer", push(f"bearer {token(iat=-(2 ** 63))}"), 403, "ExpiredProviderToken")
        check("signed by another key", push(f"bearer {token(key=stranger)}"), 403, "InvalidProviderToken")
        check("an unknown key ID", push(f"bearer {token(kid='ZZZZZZZZZZ')}"), 403, "InvalidProviderToken")
        check("another team", push(f"bearer {token(iss='OTHERTEAM1')}"), 403, "InvalidProviderToken")
        hs256 = jwt.encode({"iss": args.team_id, "iat": int(time.time())}, "a-shared-secret-of-32-bytes-long!",
                           algorithm="HS256", headers={"kid": args.key_id})
        check("HS256 instead of ES256", push(f"bearer {hs256}"), 403, "InvalidProviderToken")
        check("issued an hour from now", push(f"bearer {token(iat=int(time.time()) + 3600)}"), 403, "InvalidProviderToken")
        check("not a JWT", push("bearer not.a.jwt"), 403, "InvalidProviderToken")
        check("a wrong secret", push("bearer guess"), 403, "InvalidProviderToken")
        check("a good token to another device", push(f"bearer {token()}", apns_id=given, device="someone-else"), 400,
              "BadDeviceToken", apns_id=given)

        # The request's own faults, with a good token: each of APNs' reasons Herald answers for them.
        good = f"bearer {token()}"
        check("GET instead of POST", push(good, method="GET", body=b""), 405, "MethodNotAllowed")
        check("an empty body", push(good, body=b""), 400, "PayloadEmpty")
        check("a body over 4,096 bytes", push(good, body=json.dumps({"aps": {}, "pad": "x" * 4100})), 413,
              "PayloadTooLarge")
        check("apns-id not a UUID", push(good, extra={"apns-id": "not-a-uuid"}), 400, "BadMessageId")
        check("an unknown apns-push-type", push(good, extra={"apns-push-type": "carrier-pigeon"}), 400,
              "InvalidPushType")
        check("apns-priority 7", push(good, extra={"apns-priority": "7"}), 400, "BadPriority")
        check("apns-priority 10 on a background push",
              push(good, extra={"apns-push-type": "background"}, body=json.dumps({"aps": {"content-available": 1}})),
              400, "BadPriority")
        check("apns-expiration not a number", push(good, extra={"apns-expiration": "tomorrow"}), 400,
              "BadExpirationDate")
        check("apns-collapse-id over 64 bytes", push(good, extra={"apns-collapse-id": "c" * 65}), 400, "BadCollapseId")
        check("not JSON", push(good, body=b"{not json"), 400, "MalformedPayload")
        check("a JSON array", push(good, body=b"[1, 2]"), 400, "MalformedPayload")
        check("a reserved key", push(good, body=json.dumps({"aps": {}, "from": "someone"})), 400, "MalformedPayload")
        check("a good push after them all", push(good), 200)

    if failures:
        print("\n".join(failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
