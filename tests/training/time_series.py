"""The order of the cards on TensorBoard's Time Series page (its default page, nothing pinned),
written out from TensorBoard's frontend so that a test can say which cards a person sees first.

From tensorflow/tensorboard, tensorboard/webapp/metrics/utils.ts (`groupCardIdWithMetdata`,
`getTagGroupName`, `compareTagNames`), the same code as in the installed TensorBoard 2.15's
bundle (webfiles.zip, index.js): the page sorts its cards by tag with `compareTagNames`
(character by character, a run of digits compared as a number, `/` and digits before any other
character), then groups them by the tag's part before the first `/`, each group where its
first card falls. Its own cases (utils_test.ts) are checked in test_tensorboard_layout.py.
"""

import functools
import math


def _digit(c: str) -> bool:
    return "0" <= c <= "9"


def _break(c: str) -> bool:
    return c == "/" or _digit(c)


def _number_end(s: str, i: int) -> int:
    """consumeNumber: the end of the number starting before `i` (fixed point and exponents)."""
    state = "natural"
    while i < len(s):
        c = s[i]
        if state == "natural" and c == ".":
            state = "real"
        elif state in ("natural", "real") and c in "eE":
            state = "exponent_sign"
        elif state == "exponent_sign" and (_digit(c) or c in "+-"):
            state = "exponent"
        elif state == "exponent_sign" or not _digit(c):
            break
        i += 1
    return i


def _number(s: str) -> float:
    try:
        return float(s)  # JavaScript's Number(); NaN compares neither way
    except ValueError:
        return math.nan


def compare_tag_names(a: str, b: str) -> int:
    i = j = 0
    while True:
        if i == len(a):
            return 0 if j == len(b) else -1
        if j == len(b):
            return 1
        if _digit(a[i]) and _digit(b[j]):
            i0, j0 = i, j
            i, j = _number_end(a, i + 1), _number_end(b, j + 1)
            x, y = _number(a[i0:i]), _number(b[j0:j])
            if x != y and not (math.isnan(x) or math.isnan(y)):
                return -1 if x < y else 1
            continue
        if _break(a[i]):
            if not _break(b[j]):
                return -1
        elif _break(b[j]):
            return 1
        elif a[i] != b[j]:
            return -1 if a[i] < b[j] else 1
        i, j = i + 1, j + 1


def sort_tags(tags) -> list:
    return sorted(tags, key=functools.cmp_to_key(compare_tag_names))


def card_groups(tags) -> list:
    """[(group name, [tags in it])] in the order the page shows them."""
    groups = {}
    for tag in sort_tags(tags):
        groups.setdefault(tag.split("/", 1)[0], []).append(tag)
    return list(groups.items())


def card_order(tags) -> list:
    """The tags of the cards in the order the page shows them, top to bottom."""
    return [tag for _, group in card_groups(tags) for tag in group]
