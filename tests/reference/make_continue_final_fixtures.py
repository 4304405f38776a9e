#!/usr/bin/env python3
"""Writes tests/reference/fixtures/chat_template/continue_final.json: every chat template in
testdata (chat-templates/*.jinja and newer/*.jinja) rendered with its final message left open,
by Hugging Face transformers' own `render_jinja_template(..., continue_final_message=True)` (what
`apply_chat_template(continue_final_message=True)` and vLLM run), over conversations that end in
an assistant prefill. strftime_now() is fixed to 2024-07-26 12:00:00, as in the other chat
template fixtures. Conversations a template cannot render at all are left out; a case that
transformers refuses to continue is recorded with ok: false.

Usage: python3 tests/reference/make_continue_final_fixtures.py [TESTDATA_DIR]
(needs `transformers`, no torch; default ../shared/testdata relative to the project root)."""
import datetime
import glob
import json
import os
import sys

import transformers.utils.chat_template_utils as ctu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "reference", "fixtures", "chat_template", "continue_final.json")
FIXED_NOW = datetime.datetime(2024, 7, 26, 12, 0, 0)


class _FixedDatetime(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


ctu.datetime = _FixedDatetime  # strftime_now() reads datetime.now()

CONVERSATIONS = {
    "prefill": [{"role": "user", "content": "Write a haiku."},
                {"role": "assistant", "content": "Autumn moonlight,"}],
    "prefill_trailing_space": [{"role": "system", "content": "Be brief."},
                               {"role": "user", "content": "Count to three."},
                               {"role": "assistant", "content": "One, two, "}],
    "prefill_multi_turn": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
                           {"role": "user", "content": "JSON please"},
                           {"role": "assistant", "content": "{\"answer\": \u00e9t\u00e9"}],
    "prefill_leading_newline": [{"role": "user", "content": "List"},
                                {"role": "assistant", "content": "\n- first\n"}],
    "prefill_parts": [{"role": "user", "content": "Go"},
                      {"role": "assistant", "content": [{"type": "text", "text": "Step 1:"}]}],
    "final_user": [{"role": "user", "content": "Complete this sentence: The sky is"}],
    "empty_assistant": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": ""}],
}


def main():
    testdata = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "shared", "testdata")
    base = os.path.join(testdata, "chat-templates")
    paths = sorted(glob.glob(os.path.join(base, "*.jinja")) + glob.glob(os.path.join(base, "newer", "*.jinja")))
    cases = []
    for path in paths:
        source = open(path, encoding="utf-8").read()
        rel = os.path.relpath(path, testdata)
        for name, messages in CONVERSATIONS.items():
            context = {"bos_token": "<s>", "eos_token": "</s>"}
            case = {"template": rel, "conversation": name}
            try:  # conversations the template refuses anyway (tools-only templates, list contents) are left out
                ctu.render_jinja_template(conversations=[json.loads(json.dumps(messages))], chat_template=source,
                                          **context)
            except Exception:
                continue
            try:
                out, _ = ctu.render_jinja_template(conversations=[json.loads(json.dumps(messages))],
                                                   chat_template=source, continue_final_message=True, **context)
                case.update(ok=True, output=out[0])
            except Exception as e:  # the template raised, or transformers refused to continue
                case.update(ok=False, error=type(e).__name__)
            cases.append(case)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"context": {"bos_token": "<s>", "eos_token": "</s>"}, "conversations": CONVERSATIONS,
                   "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    ok = sum(c["ok"] for c in cases)
    print(f"wrote {len(cases)} cases ({ok} rendered) from {len(paths)} templates to {OUT}")


if __name__ == "__main__":
    main()
