"""httpx over HTTP/2 against the HTTP receiver, in clear (prior knowledge) or over TLS (h2 by ALPN, the server's
certificate checked against --ca-file): sends one after another on one connection, then many at once multiplexed
(the async client, as the Admin SDK's async path uses it), /healthz and an error answer.

    python httpx_check.py --url http://127.0.0.1:PORT --secret SECRET --token TOKEN --project PROJECT
    python httpx_check.py --url https://127.0.0.1:PORT --ca-file CA.pem --secret SECRET --token TOKEN --project PROJECT

Prints one JSON object: the HTTP versions seen, the statuses, and how many sends were accepted.
"""

import argparse
import asyncio
import json
import ssl

import httpx


def send_body(token, n):
    return {"message": {"token": token, "data": {"n": str(n)}}}


async def concurrent_sends(url, headers, token, count, verify):
    async with httpx.AsyncClient(http1=False, http2=True, headers=headers, verify=verify) as client:
        answers = await asyncio.gather(*(client.post(url, json=send_body(token, "async-%d" % n)) for n in range(count)))
    return [(answer.http_version, answer.status_code, answer.json().get("name", "")) for answer in answers]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--project", required=True)
    parser.add_argument("--ca-file", help="the CA that signed the server's certificate (https URLs)")
    arguments = parser.parse_args()
    verify = ssl.create_default_context(cafile=arguments.ca_file) if arguments.ca_file else True
    headers = {"authorization": "Bearer " + arguments.secret}
    send_url = "%s/v1/projects/%s/messages:send" % (arguments.url, arguments.project)
    result = {"versions": set(), "statuses": [], "accepted": 0}

    with httpx.Client(http1=False, http2=True, headers=headers, verify=verify) as client:
        for n in range(20):
            answer = client.post(send_url, json=send_body(arguments.token, "sync-%d" % n))
            result["versions"].add(answer.http_version)
            result["statuses"].append(answer.status_code)
            if answer.json().get("name", "").startswith("projects/%s/messages/" % arguments.project):
                result["accepted"] += 1
        health = client.get(arguments.url + "/healthz")
        result["versions"].add(health.http_version)
        result["healthz"] = [health.status_code, health.json()]
        wrong = client.post(send_url, content=b"{not json", headers={"content-type": "application/json"})
        result["versions"].add(wrong.http_version)
        result["error"] = [wrong.status_code, wrong.json()["error"]["status"]]

    for version, status, name in asyncio.run(concurrent_sends(send_url, headers, arguments.token, 50, verify)):
        result["versions"].add(version)
        result["statuses"].append(status)
        if name.startswith("projects/%s/messages/" % arguments.project):
            result["accepted"] += 1

    result["versions"] = sorted(result["versions"])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
