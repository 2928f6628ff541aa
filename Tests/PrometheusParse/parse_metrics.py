"""Parses a Prometheus text-format page with prometheus-client's own parser and prints every sample as one
JSON object per line: {"name": ..., "labels": {...}, "value": ...}. Exits 1 when the page does not parse."""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families

text = sys.stdin.read()
try:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            print(json.dumps({"family": family.name, "type": family.type, "name": sample.name,
                              "labels": sample.labels, "value": sample.value}))
except Exception as error:  # the parser raises ValueError and friends on a malformed page
    print(f"does not parse: {error}", file=sys.stderr)
    sys.exit(1)
