"""Landing the typed tables: layouts from the stream, typed writes (decode and append, MERGE,
history), lifecycle events and the start-time reconcile. Imports ``land``, never ``engine``."""
