"""The broker's gates: what holds or refuses a request because of time or staleness.

``clockskew`` (the clock measured against ZooKeeper's; token logins and writes refused
while it is not trusted) and ``freshness`` (requests held until the view of ZooKeeper is
confirmed current).
"""
