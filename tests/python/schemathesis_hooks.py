"""Schemathesis hooks for test_openapi.py (loaded through SCHEMATHESIS_HOOKS).

Generated request bodies keep their validity, but generation stays short on the CPU: a valid
max_tokens / max_completion_tokens / max_output_tokens above 8 becomes 8 and a valid n above 2 becomes 2. Values
outside the schema's ranges are left as generated, so negative cases stay negative. The schema's
max_tokens maximum comes from COSERVE_MAX_TOKENS_MAX (max_model_len - 1).
"""
import os

import schemathesis

MAX_TOKENS_MAX = int(os.environ["COSERVE_MAX_TOKENS_MAX"])


def _cap(body, field, lo, hi, cap):
    v = body.get(field)
    if isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi and v > cap:
        body[field] = cap


@schemathesis.hook
def map_body(context, body):
    if isinstance(body, dict):
        for field in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
            _cap(body, field, 1, MAX_TOKENS_MAX, 8)
        _cap(body, "n", 1, 128, 2)
    return body
