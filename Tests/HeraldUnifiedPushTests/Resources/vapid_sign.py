"""An application server's VAPID identity (RFC 8292) made with PyJWT and cryptography, not Herald's code.

    vapid_sign.py AUDIENCE EXPIRY

Prints one JSON object: key (the public key, uncompressed point, base64url) and authorization (the header value
`vapid t=<ES256 JWT for AUDIENCE expiring at EXPIRY>, k=<key>`).
"""

import base64
import json
import sys

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

private = ec.generate_private_key(ec.SECP256R1())
point = private.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
key = base64.urlsafe_b64encode(point).rstrip(b"=").decode()
token = jwt.encode({"aud": sys.argv[1], "exp": int(sys.argv[2]), "sub": "mailto:ops@example.org"}, private, algorithm="ES256")
print(json.dumps({"key": key, "authorization": f"vapid t={token}, k={key}"}))
