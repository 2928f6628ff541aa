"""Gets an access token from Herald's /token the way google-auth does for a service-account file: the JWT-bearer
grant (RFC 7523) with an RS256 assertion signed by the file's private key (PyJWT), its `iss` the file's
client_email, `aud` its token_uri, the firebase.messaging scope, valid for an hour.

Run by HeraldCommandTests' AdminSDKProxyTests, which then sends with the token and revokes the key:

    .build-python/bin/python Tests/AdminSDK/access_token.py --credentials service-account.json \
        --url http://127.0.0.1:PORT/token

Prints the access token; exits 1 with Herald's answer when there is none.
"""

import argparse
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import jwt


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--credentials", required=True)
    parser.add_argument("--url", required=True, help="Herald's /token on its own address")
    arguments = parser.parse_args()

    with open(arguments.credentials, encoding="utf-8") as file:
        account = json.load(file)
    now = int(time.time())
    claims = {
        "iss": account["client_email"],
        "aud": account["token_uri"],
        "scope": "https://www.googleapis.com/auth/firebase.messaging",
        "iat": now,
        "exp": now + 3600,
    }
    assertion = jwt.encode(claims, account["private_key"], algorithm="RS256", headers={"kid": account["private_key_id"]})
    form = urllib.parse.urlencode({"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": assertion})
    request = urllib.request.Request(arguments.url, data=form.encode("ascii"), method="POST")
    request.add_header("Content-Type", "application/x-www-form-urlencoded")
    # Herald is on loopback: no proxy of the environment.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=60) as answer:
            body = json.load(answer)
    except urllib.error.HTTPError as error:
        print(f"HTTP {error.code}: {error.read().decode('utf-8', 'replace')}", file=sys.stderr)
        return 1
    if body.get("token_type") != "Bearer" or not body.get("access_token"):
        print(f"no access token: {body!r}", file=sys.stderr)
        return 1
    print(body["access_token"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
