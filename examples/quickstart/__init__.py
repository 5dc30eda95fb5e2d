"""The outbox quick start of docs/outbox.md, as files that run
(``tests/examples/test_quickstart.py`` checks that the manual shows them as they are and runs
them).

``shop.py`` defines the app, its own business tables and the ``build_worker`` that
``celery_app.py`` hands to ``make_celery``; ``web.py`` is a process without the store that
sends through the outbox with a plain database session.
"""
