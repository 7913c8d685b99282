// The client library arrives in BGTaskScheduler.swift.
