print("feed-reader: not yet")
