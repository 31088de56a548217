"""The broker's event loop: which loop runs, how it is watched, what runs off it.

``eventloop`` (uvloop or asyncio's, and the GIL switch interval), ``loopwatch`` (loop
lag and GIL hold measured from a thread of its own) and ``offloop`` (large encodes and
decodes in a worker thread).
"""
