#!/usr/bin/env python3
"""Writes the seed corpora Fuzz/Corpus/<target>/ from the sample payloads (Tests/HeraldTests/Resources/payloads,
the project's copy of ../shared/testdata/payloads) and the test files' cases: the JSON bodies, APNs payloads,
conditions and config files written in the tests, bad ones included. Run by scripts/fuzz; deterministic (each
seed is named by its content's SHA-1), so running it again changes nothing."""
import base64, hashlib, os, re, shutil, sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
corpus = os.path.join(root, "Fuzz", "Corpus")
payloads = os.path.join(root, "Tests", "HeraldTests", "Resources", "payloads")

def test_sources():
    for directory, _, files in os.walk(os.path.join(root, "Tests")):
        for name in sorted(files):
            if name.endswith(".swift"):
                yield open(os.path.join(directory, name), encoding="utf-8").read()

def raw_strings():
    """Every Swift raw string literal #"..."# in the tests, as the bytes it stands for."""
    for text in test_sources():
        for match in re.finditer(r'#"(.*?)"#', text):
            yield match.group(1).replace("\\#(token)", "fuzz-token").replace(r"\#(", "(")

def multiline_strings():
    for text in test_sources():
        for match in re.finditer(r'"""\n(.*?)\n\s*"""', text, re.S):
            lines = match.group(1).split("\n")
            indent = min((len(l) - len(l.lstrip()) for l in lines if l.strip()), default=0)
            yield "\n".join(l[indent:] for l in lines) + "\n"

def sample(name):
    return open(os.path.join(payloads, name), "rb").read()

fcm = [sample(n) for n in sorted(os.listdir(payloads)) if n.startswith("fcm-v1-")]
fcm += [s.encode() for s in raw_strings() if s.startswith('{"message"')]
apns_payloads = [sample("apns-provider-alert.json"), sample("seed-alert-apns.json")]
apns_payloads += [s.encode() for s in raw_strings() if s.startswith('{"aps"')]
conditions = set()
for text in test_sources():
    for match in re.finditer(r'"((?:[^"\\]|\\.)*in topics(?:[^"\\]|\\.)*)"', text):
        conditions.add(match.group(1).replace('\\"', '"'))
for body in fcm:
    for match in re.finditer(rb'"condition"\s*:\s*"((?:[^"\\]|\\.)*)"', body):
        conditions.add(match.group(1).decode().replace('\\"', '"'))
# A config file starts with a key: a setting's (kebab case) or a plugin's section (TokenWebhook:).
configs = [s for s in multiline_strings() if re.match(r"^[A-Za-z-]+:", s)]
configs += ["", "# comments only\n", "http: none\nsocket: none\n", "nats-servers: [nats://127.0.0.1:4222]\ngateway: true\n",
            "plugins:\n  - /a.so\n  - /b.so\n", "shutdown-grace: 99999999999999999999\n", "echo: maybe\n", "- a\n- b\n",
            "anchor: &a x\nproject-id: *a\n", "project-id: a\nproject-id: b\n", "http: [\n",
            # Plugins' sections: a key in its section, in another's, both ways, a section that is no mapping, an empty one.
            "TokenWebhook:\n  token-webhook-url: http://a/\n  token-webhook-max-attempts: 3\nlog-level: debug\n",
            "HTTPReceiver: {http: none}\nSocketReceiver: {socket: none}\nNATSReceiver:\n  nats-servers: [nats://a:4222]\n  gateway: true\n",
            "TokenWebhook:\n  nats-user: x\n", "token-webhook-url: http://a/\nTokenWebhook:\n  token-webhook-url: http://b/\n",
            "ExecFetchWorker: x\n", "ExecFetchWorker:\n", "TokenWebhook: {}\nTokenWebhook: {}\n"]

def request(method, path, body=b"", headers=(), chunked=False, secret=True):
    head = [f"{method} {path} HTTP/1.1", "Host: localhost"]
    if secret:
        head.append("Authorization: Bearer fuzz-secret")
    head += list(headers)
    if chunked:
        head.append("Transfer-Encoding: chunked")
        data = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:7], body[7:]) if part) + b"0\r\n\r\n"
    else:
        if body or method in ("POST", "PUT"):
            head.append(f"Content-Length: {len(body)}")
        data = body
    return ("\r\n".join(head) + "\r\n\r\n").encode() + data

send = "/v1/projects/demo/messages:send"
http = []
for index, body in enumerate(fcm):
    http.append(request("POST", send, body, chunked=index % 3 == 1))
for body in apns_payloads:
    http.append(request("POST", "/3/device/fuzz-token", body, headers=["apns-push-type: alert", "apns-priority: 10",
        "apns-id: 123e4567-e89b-12d3-a456-426614174000", "apns-expiration: 0", "apns-collapse-id: c"]))
topics = "/v1/projects/demo/registrations/fuzz-token/topicSubscriptions"
http += [
    # What RFC 9112 says a server must refuse (HTTPStrictnessTests), and Expect (100 Continue, 417).
    request("POST", send, fcm[0], headers=["X-Folded: one", " two"]),
    request("POST", send, fcm[0], headers=["X-Space : one"]),
    request("POST", send, fcm[0], headers=["Host: other"]),
    request("POST", send, fcm[0], headers=["Expect: 100-continue"]),
    request("POST", send, fcm[0], headers=["Expect: 100-continue"], secret=False),
    request("POST", send, fcm[0], headers=["Expect: 200-ok"]),
    request("GET", "/healthz", secret=False),
    request("POST", topics + "?topic_name=news"),
    request("DELETE", topics + "/news?allow_missing=true"),
    request("POST", "/iid/v1:batchAdd", b'{"to": "/topics/news", "registration_tokens": ["fuzz-token", "other"]}'),
    request("POST", "/iid/v1:batchRemove", b'{"to": "news", "registration_tokens": ["fuzz-token"]}'),
    request("POST", send, fcm[0], secret=False),
    request("GET", send),
    request("POST", "/v1/projects/other/messages:send", fcm[0]),
    request("POST", send, b"x" * 5000),
    request("POST", send, headers=["X-Long: " + "a" * 2100]),
    request("POST", send, fcm[0], headers=["Connection: close"]) + request("GET", "/healthz"),
    request("POST", send, fcm[0]) + request("POST", send, fcm[-1]) + request("GET", "/healthz", secret=False),
    b"GET /healthz HTTP/1.0\r\n\r\n",
    b"GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    b"NOT HTTP\r\n\r\n",
]
# Fuzz findings, kept as seeds so that every run starts from them (each also a test in the normal suite).
http += [
    # HTTPFuzzFindingsTests.queryItemWithoutName: a query item of only '=' trapped in HTTPSession.queryItems.
    b"POST /v1/projects/demo/registrations/fuzz-token/topicSubscriptions?= HTTP/1.1\r\n"
    b"Host: localhost\r\nAuthorization: Bearer fuzz-secret\r\nContent-Length: 0\r\n\r\n",
]
socket = [b"\n".join(fcm[i:i + 3]).replace(b"\n  ", b" ") + b"\n" for i in range(0, len(fcm), 3)]
socket = [re.sub(rb"\s*\n\s*", b" ", body.strip()) + b"\n" for body in fcm] + socket
socket += [b"not json\n", b"\r\n\n\n", b'{"message": {"token": "t"}}\r\n' * 3, b"x" * 600 + b"\n", b'{"message": {"token": "t"}}']

# HTTP/2: the client's frames after the preface, HPACK without Huffman coding or the dynamic table.
def hpack_int(value, prefix_bits, first=0):
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    return bytes(out + [value])

def hpack_field(name, value):
    """A literal field without indexing, a static-table name where there is one."""
    static = {":authority": 1, ":path": 4, "content-type": 31, "authorization": 23, "content-length": 28}
    if name in static:
        head = hpack_int(static[name], 4)
    else:
        head = b"\x00" + hpack_int(len(name), 7) + name.encode()
    return head + hpack_int(len(value), 7) + value

def frame(kind, flags, stream, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload

def request_block(method, path, fields=()):
    block = bytes([0x82 if method == "GET" else 0x83, 0x86]) + hpack_field(":path", path.encode())
    block += hpack_field(":authority", b"127.0.0.1:8080")
    for name, value in fields:
        block += hpack_field(name, value)
    return block

settings = frame(4, 0, 0) + frame(4, 1, 0)
auth = [("authorization", b"Bearer fuzz-secret"), ("content-type", b"application/json")]
http2 = [settings + frame(1, 0x05, 1, request_block("GET", "/healthz"))]
for index, body in enumerate(fcm[:6]):
    stream = 1 + 2 * index
    block = request_block("POST", send, auth + [("content-length", str(len(body)).encode())])
    http2.append(settings + frame(1, 0x04, stream, block) + frame(0, 0x01, stream, body))
block = request_block("POST", "/3/device/fuzz-token", auth + [("apns-push-type", b"alert")])
http2.append(settings + frame(1, 0x00, 1, block[:10]) + frame(9, 0x04, 1, block[10:]) + frame(0, 0x01, 1, apns_payloads[0]))
http2.append(settings + b"".join(frame(1, 0x05, 1 + 2 * i, request_block("GET", "/healthz")) + frame(3, 0, 1 + 2 * i, b"\x00\x00\x00\x08") for i in range(20)))
http2.append(settings + frame(6, 0, 0, b"12345678") + frame(8, 0, 0, b"\x00\x01\x00\x00") + frame(2, 0, 1, b"\x00\x00\x00\x00\x10")
             + frame(1, 0x05, 3, request_block("GET", "/x", [("x-big", b"v" * 3000)])) + frame(7, 0, 0, b"\x00" * 8))
http2.append(settings + frame(1, 0x04, 1, request_block("POST", send, auth + [("content-length", b"99999")])) + frame(0, 0x01, 1, b"{}"))

def write(target, seeds, prefix=lambda seed: b""):
    directory = os.path.join(corpus, target)
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    for seed in seeds:
        data = prefix(seed) + seed
        with open(os.path.join(directory, hashlib.sha1(data).hexdigest()), "wb") as file:
            file.write(data)

# The socket targets' first byte picks the chunking (FuzzInput.chunked): 0x0F whole, 0x00 byte by byte, and one between.
chunkings = [b"\x0f", b"\x00", b"\x37"]
write("fcm-v1", fcm)
write("apns", apns_payloads + [b"apns-push-type: background\napns-priority: 10\n\n" + p for p in apns_payloads[:1]]
      + [b"apns-id: 123e4567-e89b-12d3-a456-426614174000\napns-expiration: 1700000000\napns-collapse-id: c\n\n" + p for p in apns_payloads])
write("condition", sorted(c.encode() for c in conditions))
write("config", [c.encode() for c in configs])
write("http", [c + s for s in http for c in chunkings[:1]] + [chunkings[1] + http[0], chunkings[2] + http[-4]])
write("http2", [c + s for s in http2 for c in chunkings[:1]] + [chunkings[1] + http2[1], chunkings[2] + http2[-3]])
write("socket", [c + s for s in socket for c in chunkings[:1]] + [chunkings[1] + socket[0], chunkings[2] + socket[-1]])
# auth: the first byte picks the parser (FuzzAuth), its high bit signing the rest as a token's claims.
def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=")

def jwt(header, claims, signature=b"\x01" * 64):
    return b".".join([b64url(header), b64url(claims), b64url(signature)])

service_account_claims = [
    b'{"iss":"fuzz@demo.iam.gserviceaccount.com","aud":"https://oauth2.googleapis.com/token","iat":1700000000,'
    b'"exp":1700003600,"scope":"https://www.googleapis.com/auth/firebase.messaging"}',
    b'{"iss":"fuzz@demo.iam.gserviceaccount.com","aud":["x","https://oauth2.googleapis.com/token"],"iat":1699999000,'
    b'"exp":1700002000,"scope":"openid https://www.googleapis.com/auth/cloud-platform"}',
    b'{"iss":"fuzz@demo.iam.gserviceaccount.com","aud":"https://oauth2.googleapis.com/token","iat":1700000000,"exp":1700007201}',
    b'{"iss":"other@demo.iam.gserviceaccount.com","aud":"https://oauth2.googleapis.com/token"}',
]
apns_claims = [b'{"iss":"TEAM123456","iat":1700000000}', b'{"iss":"TEAM123456","iat":1699996399}',
               b'{"iss":"TEAM123456","iat":1700000301}', b'{"iss":"TEAM000000","iat":1700000000}', b'{"iss":"TEAM123456","iat":"1700000000"}']
vapid_claims = [b'{"aud":"https://push.example.com","exp":1700003600,"sub":"mailto:ops@example.com"}',
                b'{"aud":"https://push.example.com:8443","exp":1700003600}', b'{"aud":"https://push.example.com","exp":1700086401}',
                b'{"aud":"https://push.example.com"}', b"[]"]
rs256 = b'{"alg":"RS256","typ":"JWT","kid":"fuzzkey"}'
es256 = b'{"alg":"ES256","kid":"KEY1234567"}'
vapid_key = b64url(b"\x04" + bytes(range(1, 65)))
auth = [b"\x80" + c for c in service_account_claims] + [b"\x81" + c for c in apns_claims] + [b"\x82" + c for c in vapid_claims]
auth += [b"\x00grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=" + jwt(rs256, c, b"\x02" * 256)
         for c in service_account_claims[:2]]
auth += [b"\x00grant_type=client_credentials", b"\x00grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=a.b",
         b"\x00grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=" + jwt(b'{"alg":"none"}', service_account_claims[0], b"")]
auth += [b"\x01bearer " + jwt(es256, c) for c in apns_claims[:2]] + [b"\x01Bearer  ", b"\x01basic dXNlcjpwYXNz"]
auth += [b"\x02vapid t=" + jwt(b'{"typ":"JWT","alg":"ES256"}', c) + b", k=" + vapid_key for c in vapid_claims[:2]]
auth += [b"\x02vapid t=a.b.c,k=" + vapid_key + b"==", b"\x02VAPID k=x", b"\x02WebPush abc"]
auth += [b"\x03" + h for h in (b"60\nhigh\nnews_1", b"0\nvery-low", b"2419201\nLOW\n" + b"a" * 32, b"-1", b"60\nurgent",
                                b"60\nnormal\n" + b"a" * 33, b"\n\n", b"1e3\nhigh\nno/slash")]
connect = [b"CONNECT fcm.googleapis.com:443 HTTP/1.1\r\nHost: fcm.googleapis.com:443\r\n\r\n\x16\x03\x01\x00\x05hello",
           b"CONNECT oauth2.googleapis.com:443 HTTP/1.0\r\n\r\n", b"CONNECT example.com:443 HTTP/1.1\r\n\r\n",
           b"CONNECT fcm.googleapis.com:443\r\n\r\n", b"CONNECT  fcm.googleapis.com:443 HTTP/1.1\r\n\r\n",
           b"CONNECT fcm.googleapis.com:443 HTTP/1.1\r\nX-Long: " + b"a" * 1100 + b"\r\n\r\n",
           b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n", b"CONN"]
auth += [b"\x04" + c + s for s in connect for c in chunkings[:1]] + [b"\x04" + chunkings[1] + connect[0], b"\x04" + chunkings[2] + connect[-3]]
# Fuzz findings, kept as seeds (each also a test in the normal suite, AuthParserTests): an iat far in the past
# overflowed the age and lifetime arithmetic of a signed provider token and a signed assertion.
auth += [b'\x81{"iss":"TEAM123456","iat":-9223372036854775000}',
         b'\x80{"iss":"fuzz@demo.iam.gserviceaccount.com","aud":"https://oauth2.googleapis.com/token","iat":-9223372036854775000,'
         b'"exp":1700000000,"scope":"https://www.googleapis.com/auth/firebase.messaging"}']
write("auth", auth)
# tls: ClientHellos of Python's ssl module (TLS 1.3 and 1.2, with and without ALPN and SNI), whole, cut and after
# garbage, made once and kept as they are: a ClientHello holds random bytes, so making them here would change them
# at every run.
for target in sorted(os.listdir(corpus)):
    files = os.listdir(os.path.join(corpus, target))
    size = sum(os.path.getsize(os.path.join(corpus, target, f)) for f in files)
    print(f"seeds: {target}: {len(files)} inputs, {size} bytes", file=sys.stderr)
