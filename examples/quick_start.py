import numpy as np
import bulkbloom

# Dedup a numpy array: keep the first sighting of each id, in order.
ids = np.array([7, 42, 7, 99, 42, 5, 99], dtype=np.uint64)
f = bulkbloom.Filter(1_000_000, 0.001)  # sized for 1M keys at 0.1% false positives
is_new = f.insert_if_absent(ids)
print(is_new)
print(ids[is_new])
print(42 in f, 1234 in f, f.layout)

# Strings (numpy, Arrow or lists) are keys too, hashed as bytes like the CLI's `-f lines`.
print(f.insert_if_absent(["alice", "bob", "alice"]))

# Save and load in the project's file format (Filter.map maps it without copying).
f.save("ids.bbf")
g = bulkbloom.Filter.load("ids.bbf")
print(g.contains(ids).all(), round(g.estimated_count()))

# A sliding window over event time: drop a key seen within the last hour.
w = bulkbloom.WindowedFilter.for_event_time(records_per_unit=1000, window=3600, fpr=0.001)
print(w.insert_if_absent(["a", "b", "a", "a"], times=[0, 10, 3000, 9000]))
