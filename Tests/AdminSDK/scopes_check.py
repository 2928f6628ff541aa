"""An app server with a service-account file whose key lacks the manage-topics scope, unchanged, through Herald's
FCM proxy (run by HeraldCommandTests' SendersTests with HTTPS_PROXY and the CA as proxy_check.py is).

Sends to a token (its data {"check": "scoped-send"}), then subscribes the token to a topic, which Herald must refuse
with 403 PERMISSION_DENIED: the SDK raises PermissionDeniedError. Prints what happened; exits 0 when both did as
expected, 1 otherwise.
"""

import argparse
import sys

import firebase_admin
from firebase_admin import credentials, exceptions, messaging


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--credentials", required=True)
    parser.add_argument("--token", required=True)
    arguments = parser.parse_args()

    firebase_admin.initialize_app(credentials.Certificate(arguments.credentials))
    name = messaging.send(messaging.Message(token=arguments.token, data={"check": "scoped-send"}))
    print(f"sent: {name}")
    try:
        messaging.subscribe_to_topic([arguments.token], "news")
    except exceptions.PermissionDeniedError as error:
        print(f"subscribe refused: PermissionDeniedError: {error}")
        return 0
    except exceptions.FirebaseError as error:
        print(f"subscribe failed otherwise: {type(error).__name__}: {error}")
        return 1
    print("subscribe was accepted")
    return 1


if __name__ == "__main__":
    sys.exit(main())
