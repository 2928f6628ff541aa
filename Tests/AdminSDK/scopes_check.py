"""An app server with a service-account file whose key lacks the manage-topics scope, unchanged, through Herald's
FCM proxy (run by HeraldCommandTests' SendersTests with HTTPS_PROXY and the CA as proxy_check.py is).

Sends to a token (its data {"check": "scoped-send"}), then subscribes the token to a topic both ways the SDK has,
which Herald must refuse with 403 PERMISSION_DENIED: `subscribe_to_topic` (FCM v1's topicSubscriptions) reports the
token as failed with reason PERMISSION_DENIED, `subscribe_to_topic_legacy` (the Instance ID API) raises
PermissionDeniedError. Prints what happened; exits 0 when each did as expected, 1 otherwise.
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
    passed = True
    response = messaging.subscribe_to_topic([arguments.token], "news")
    reasons = [error.reason for error in response.errors]
    print(f"subscribe: {response.success_count} subscribed, failed: {reasons}")
    passed &= response.success_count == 0 and reasons == ["PERMISSION_DENIED"]
    try:
        messaging.subscribe_to_topic_legacy([arguments.token], "news")
        print("legacy subscribe was accepted")
        passed = False
    except exceptions.PermissionDeniedError as error:
        print(f"legacy subscribe refused: PermissionDeniedError: {error}")
    except exceptions.FirebaseError as error:
        print(f"legacy subscribe failed otherwise: {type(error).__name__}: {error}")
        passed = False
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
