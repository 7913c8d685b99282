import BGPolicyCore
@testable import BGPolicyStore
import Foundation
import Testing

@Suite("TaskStore: content-available wakes and their buckets")
struct ContentWakeStoreTests {
    static func wake(
        _ appID: AppID, _ payload: [UInt8] = [1, 2, 3, 0, 255], receivedAt: UnixTime = 1_700_000_100.5,
        count: Int = 1
    ) -> ContentWakeRecord {
        ContentWakeRecord(
            appID: appID, payload: payload, payloadEncoding: "test-1", receivedAt: receivedAt,
            firstReceivedAt: 1_700_000_000.25, notificationCount: count)
    }

    @Test("a wake and a bucket round-trip; the payload's bytes come back exactly")
    func roundTrip() throws {
        let store = try TaskStore.inMemory()
        try store.saveApp(Sample.app(Sample.maps))
        try store.saveApp(Sample.app(Sample.feeds))
        #expect(try store.contentWakes().isEmpty)
        #expect(try store.contentBuckets(perHour: 3).isEmpty)
        let maps = Self.wake(Sample.maps, Array(0...255).map(UInt8.init), count: 4)
        let feeds = Self.wake(Sample.feeds, [])
        let bucket = ContentAvailableBucket(charges: [1_700_000_000.1, 1_700_000_060.2, 1_700_000_130.75])
        try store.saveContentWake(maps, bucket: bucket)
        try store.saveContentWake(feeds, bucket: nil)
        #expect(try store.contentWakes() == [feeds, maps])
        #expect(try store.contentBuckets(perHour: 3) == [Sample.maps: bucket])
    }

    @Test("a new wake replaces the stored one, and its bucket is replaced or removed with it")
    func replace() throws {
        let store = try TaskStore.inMemory()
        try store.saveApp(Sample.app(Sample.maps))
        try store.saveContentWake(Self.wake(Sample.maps, [1]), bucket: ContentAvailableBucket(charges: [10]))
        let newer = Self.wake(Sample.maps, [2, 2], receivedAt: 1_700_000_200, count: 2)
        try store.saveContentWake(newer, bucket: ContentAvailableBucket(charges: [10, 20]))
        #expect(try store.contentWakes() == [newer])
        #expect(try store.contentBuckets(perHour: 3) == [Sample.maps: ContentAvailableBucket(charges: [10, 20])])
        try store.saveContentWake(newer, bucket: nil)
        #expect(try store.contentBuckets(perHour: 3).isEmpty)
    }

    @Test("the clock set moves every stored bucket and wake time by the step, once, and nothing else")
    func timesMoved() throws {
        let store = try TaskStore.inMemory()
        try store.saveApp(Sample.app(Sample.maps))
        try store.saveApp(Sample.app(Sample.feeds))
        var wake = Self.wake(Sample.maps)
        try store.saveContentWake(wake, bucket: ContentAvailableBucket(charges: [10, 10.5, .nan]))
        try store.saveContentWake(Self.wake(Sample.feeds), bucket: nil)
        try store.deleteContentWake(appID: Sample.feeds)
        try store.moveContentTimes(by: 660)
        wake.receivedAt += 660
        wake.firstReceivedAt += 660
        #expect(try store.contentWakes() == [wake])
        #expect(try store.contentBuckets(perHour: 3)[Sample.maps]?.charges.prefix(2) == [670, 670.5])
        #expect(try store.contentBuckets(perHour: 3)[Sample.maps]?.charges.last?.isNaN == true)
        try store.moveContentTimes(by: -700)
        try store.moveContentTimes(by: .nan)
        try store.moveContentTimes(by: 0)
        wake.receivedAt -= 700
        wake.firstReceivedAt -= 700
        #expect(try store.contentWakes() == [wake])
        #expect(try store.contentBuckets(perHour: 3)[Sample.maps]?.charges.prefix(2) == [-30, -29.5])
    }

    @Test("a delivered wake's row goes; its bucket stays, so the count holds")
    func deleteKeepsBucket() throws {
        let store = try TaskStore.inMemory()
        try store.saveApp(Sample.app(Sample.maps))
        try store.saveApp(Sample.app(Sample.feeds))
        let bucket = ContentAvailableBucket(charges: [10, 11, 12])
        try store.saveContentWake(Self.wake(Sample.maps), bucket: bucket)
        try store.saveContentWake(Self.wake(Sample.feeds), bucket: nil)
        try store.deleteContentWake(appID: Sample.maps)
        try store.deleteContentWake(appID: Sample.maps)  // nothing left: no error
        #expect(try store.contentWakes().map(\.appID) == [Sample.feeds])
        #expect(try store.contentBuckets(perHour: 3) == [Sample.maps: bucket])
    }

    @Test("an app's wake and bucket go with the app's row; a wake for an unknown app is refused")
    func cascade() throws {
        let store = try TaskStore.inMemory()
        try store.saveApp(Sample.app(Sample.maps))
        try store.saveApp(Sample.app(Sample.feeds))
        try store.saveContentWake(Self.wake(Sample.maps), bucket: ContentAvailableBucket(charges: [10, 10]))
        try store.saveContentWake(Self.wake(Sample.feeds), bucket: ContentAvailableBucket(charges: [10]))
        try store.execute(sql: "DELETE FROM apps WHERE app_id = 'org.gnome.Maps'")
        #expect(try store.contentWakes().map(\.appID) == [Sample.feeds])
        #expect(try store.contentBuckets(perHour: 3).keys.sorted() == [Sample.feeds])
        #expect(throws: StoreError.self) {
            try store.saveContentWake(Self.wake(AppID("org.example.Nobody")), bucket: nil)
        }
        #expect(try store.contentWakes().map(\.appID) == [Sample.feeds])
    }

    @Test("rows with an app id this agent does not accept are left out, and left in the file")
    func unknownRows() throws {
        let store = try TaskStore.inMemory()
        try store.execute(sql: """
            INSERT INTO apps (app_id, identity, registered_at) VALUES ('not an id', 'flatpak', 1);
            INSERT INTO content_wakes VALUES ('not an id', x'00', 'test-1', 1, 1, 1);
            INSERT INTO content_buckets VALUES ('not an id', 1, 1, '1');
            """)
        #expect(try store.contentWakes().isEmpty)
        #expect(try store.contentBuckets(perHour: 3).isEmpty)
    }

    @Test("wakes and buckets survive closing and reopening the file")
    func persistence() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        let wake = Self.wake(Sample.maps, [9, 8, 7])
        let bucket = ContentAvailableBucket(charges: [1_700_000_000.125])
        do {
            let store = try TaskStore(path: path)
            try store.saveApp(Sample.app(Sample.maps))
            try store.saveContentWake(wake, bucket: bucket)
        }
        let reopened = try TaskStore(path: path)
        #expect(try reopened.contentWakes() == [wake])
        #expect(try reopened.contentBuckets(perHour: 3) == [Sample.maps: bucket])
    }

    @Test("a file made before content wakes were stored migrates, keeping its apps")
    func migrateFromV2() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/state.sqlite"
        try TaskStore.createFile(path: path, migratedUpTo: "v2-usage-hourly", sql: """
            INSERT INTO apps (app_id, identity, registered_at) VALUES ('org.gnome.Maps', 'flatpak', 10);
            """)
        let store = try TaskStore(path: path)
        #expect(try store.contentWakes().isEmpty)
        try store.saveContentWake(Self.wake(Sample.maps), bucket: nil)
        #expect(try store.contentWakes().map(\.appID) == [Sample.maps])
    }

    @Test("a full disk throws .full and keeps the wake stored before")
    func fullDisk() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let store = try TaskStore(path: scratch.path + "/tasks.db")
        try store.saveApp(Sample.app(Sample.maps))
        let first = Self.wake(Sample.maps, [1])
        try store.saveContentWake(first, bucket: ContentAvailableBucket(charges: [10]))
        try store.capFileSize(extraPages: 0)
        // Bigger than a page, so that it cannot fit in the room left.
        let big = Self.wake(Sample.maps, [UInt8](repeating: 7, count: 20_000), count: 2)
        #expect {
            try store.saveContentWake(big, bucket: ContentAvailableBucket(charges: [10, 20]))
        } throws: { error in
            if case .full = error as? StoreError { true } else { false }
        }
        #expect(try store.contentWakes() == [first])
        #expect(try store.contentBuckets(perHour: 3) == [Sample.maps: ContentAvailableBucket(charges: [10])])
    }

    @Test("a file an earlier agent wrote, with buckets as tokens, migrates: short of a token reads as spent at its time")
    func migrateTokenBuckets() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/state.sqlite"
        try TaskStore.createFile(path: path, migratedUpTo: "v8-cpu-quota-before", sql: """
            INSERT INTO apps (app_id, identity, registered_at) VALUES
                ('org.gnome.Maps', 'flatpak', 10), ('org.example.Feeds', 'flatpak', 10);
            INSERT INTO content_buckets (app_id, tokens, updated_at) VALUES
                ('org.gnome.Maps', 2.9, 1700000000.5), ('org.example.Feeds', 3, 1700000000.5);
            """)
        let store = try TaskStore(path: path)
        #expect(try store.contentBuckets(perHour: 3) == [
            Sample.maps: ContentAvailableBucket(charges: [1_700_000_000.5, 1_700_000_000.5, 1_700_000_000.5]),
            Sample.feeds: ContentAvailableBucket(charges: []),
        ])
        // A clock set moves them too; a new save stores charges, read as they are.
        try store.moveContentTimes(by: 60)
        #expect(try store.contentBuckets(perHour: 4)[Sample.maps] == ContentAvailableBucket(charges: Array(repeating: 1_700_000_060.5, count: 4)))
        // Read with the limit of the time: 2.9 tokens of 1 is a full bucket.
        #expect(try store.contentBuckets(perHour: 1)[Sample.maps] == ContentAvailableBucket(charges: []))
        try store.saveContentWake(Self.wake(Sample.maps), bucket: ContentAvailableBucket(charges: [1_700_000_100]))
        #expect(try store.contentBuckets(perHour: 3)[Sample.maps] == ContentAvailableBucket(charges: [1_700_000_100]))
    }
}
