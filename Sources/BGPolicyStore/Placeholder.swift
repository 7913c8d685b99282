// The store arrives in TaskStore.swift.
