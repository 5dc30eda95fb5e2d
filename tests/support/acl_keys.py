"""Access keys for the access-control tests of both broker services: one key with every right,
and one lacking each right an operation may need (topic PUB, topic SUB, any topic right, the
group, topic creation)."""

ALL = {"topics": {"*": "PUB|SUB"}, "groups": {"*": "SUB"}, "create_topics": True}
KEYS_LACKING_ONE_RIGHT = {
    "all": ALL,
    "no-topic-pub": {**ALL, "topics": {"*": "SUB"}},
    "no-topic-sub": {**ALL, "topics": {"*": "PUB"}},
    "no-topic-right": {**ALL, "topics": {"*": "DENY"}},
    "no-group": {**ALL, "groups": {"others": "SUB"}},
    "no-create": {**ALL, "create_topics": False},
}
