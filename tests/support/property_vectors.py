"""Property-string parse cases from VECTORS.md §7 (RocketMQ MessageDecoderTest), shared by the
tests of our codec and of the independent decoder."""

PROPERTY_PARSE_CASES = [
    ("k1\x01v1", {"k1": "v1"}),
    ("", {}),
    (" ", {}),
    ("aaa", {}),
    ("k1\x01", {}),
    ("\x01v1", {}),
    ("k1\x01v1\x02", {"k1": "v1"}),
    ("k1\x01v1\x02k2\x01v2", {"k1": "v1", "k2": "v2"}),
    ("k1\x01v1\x02\x01v2", {"k1": "v1"}),
    ("k1\x01v1\x02k2\x01", {"k1": "v1"}),
    ("\x01v1\x02k2\x01v2", {"k2": "v2"}),
    ("k1\x01\x02k2\x01v2", {"k2": "v2"}),
    ("1\x011\x022\x012", {"1": "1", "2": "2"}),
    ("1\x01\x022\x012", {"2": "2"}),
    ("\x011\x022\x012", {"2": "2"}),
    ("1\x011\x022\x01", {"1": "1"}),
    ("1\x011\x02\x012", {"1": "1"}),
]
