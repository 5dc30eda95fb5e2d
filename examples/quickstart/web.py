"""A process without the store (a web server, a script): it only writes to the database."""

from sqlalchemy.orm import sessionmaker

from postbox import outbox

from .shop import DATABASE_URL, orders

Session = sessionmaker(outbox.create_database_engine(DATABASE_URL))  # any SQLAlchemy engine


def place_order(order_id: int, item: str) -> str:
    """Store the order and its message in one transaction; return the message id."""
    with Session.begin() as session:         # one transaction: the order and its message
        session.execute(orders.insert().values(id=order_id, item=item))
        return outbox.send(session, "orders", {"order": order_id}, tags="created")
    # committed: the worker's relay publishes it (within seconds); rolled back: nothing sent
