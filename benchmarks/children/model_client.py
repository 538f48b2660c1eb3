"""The foreign agent's side of the gateway benchmark (stdlib only):
`model_client.py PORT TOKEN N`.

Sends N non-streaming `POST /v1/messages` (a one-message request, the token as `x-api-key`)
on one kept-alive connection to 127.0.0.1:PORT, after 5 unmeasured ones, and prints the
nanoseconds of each, from the request sent to the whole answer read, as a JSON list.
"""

import http.client
import json
import sys
import time

PORT, TOKEN, N = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
BODY = json.dumps(
    {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
).encode()
HEADERS = {
    "content-type": "application/json",
    "x-api-key": TOKEN,
    "anthropic-version": "2023-06-01",
}


def main() -> None:
    conn = http.client.HTTPConnection("127.0.0.1", PORT)
    took = []
    for i in range(N + 5):
        started = time.perf_counter_ns()
        conn.request("POST", "/v1/messages", body=BODY, headers=HEADERS)
        reply = conn.getresponse()
        data = reply.read()
        if i >= 5:
            took.append(time.perf_counter_ns() - started)
        if reply.status != 200 or b'"ok"' not in data:
            raise SystemExit(f"status {reply.status}: {data[:200]!r}")
    conn.close()
    print(json.dumps(took))


if __name__ == "__main__":
    main()
