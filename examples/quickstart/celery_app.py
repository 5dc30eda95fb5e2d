"""celery -A examples.quickstart.celery_app worker|beat"""

from postbox.outbox.celery_app import make_celery

from .shop import build_worker

celery = make_celery("shop", build_worker)
