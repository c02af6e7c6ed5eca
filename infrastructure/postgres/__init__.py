"""PostgreSQL for the scale deployment: Django's backend, its pool checked without a round trip.

Django takes a connection from the pool for every request and task, and
checks it on the way out with psycopg's check (an empty query): a round trip
each time, a fifth of the statements of an agent's proposal → result. An
idle connection's socket has nothing to read unless the server said something
unasked: a restarting or crashed server sends its FATAL message and closes.
So the check here looks at the socket first, and runs psycopg's only when
there is something to read; that one then fails and the pool replaces the
connection, as before. A connection the client already knows is gone fails
at once.
"""
