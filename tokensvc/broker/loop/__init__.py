"""The broker's event loop: which loop runs, how it is watched, what runs off it.

``eventloop`` (uvloop or asyncio's, and the GIL switch interval), ``loopwatch`` (loop
lag and GIL hold measured from a thread of its own), ``offloop`` (large encodes and
decodes in a worker thread) and ``slices`` (work over many items given back to the loop in
slices of time).
"""
