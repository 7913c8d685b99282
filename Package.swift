// swift-tools-version:6.1
import PackageDescription

// Every target builds in the Swift 6 language mode (strict concurrency) with
// the upcoming features that keep the module graph honest.
let strictSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "bgpolicy",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "bgpolicyd", targets: ["bgpolicyd"]),
        .executable(name: "bgpolicy", targets: ["bgpolicy"]),
        .library(name: "BGPolicyDBus", targets: ["BGPolicyDBus"]),
        .library(name: "BackgroundTasks", targets: ["BackgroundTasks"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.6.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.1.0"),
        .package(url: "https://github.com/apple/swift-system", from: "1.4.0"),
    ],
    targets: [
        // C libraries, wrapped by us (STYLE.md examples 4 and 5).
        .systemLibrary(
            name: "CBGPolicyDBus",
            pkgConfig: "dbus-1",
            providers: [.apt(["libdbus-1-dev"])]
        ),
        .systemLibrary(
            name: "CBGPolicyUdev",
            pkgConfig: "libudev",
            providers: [.apt(["libudev-dev"])]
        ),

        // timerfd and eventfd from the C library, for the wall-clock watch (WallClockWatch).
        .systemLibrary(name: "CBGPolicyClock"),

        // prctl(PR_SET_NAME) from the C library: each thread of ours carries a name.
        .systemLibrary(name: "CBGPolicyThread"),

        // The one symbol of the Swift runtime the agent needs at link time (AgentExecutor).
        .target(name: "CBGPolicyRuntime"),

        // The policy: pure, no I/O, time injected.
        .target(name: "BGPolicyCore", swiftSettings: strictSettings),

        // libdbus-1, owned by one thread per connection; only Swift values leave it.
        .target(
            name: "BGPolicyDBus",
            dependencies: [
                "CBGPolicyDBus",
                "CBGPolicyThread",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),

        // Facts from the machine: UPower, power profiles, NetworkManager, logind, udev/sysfs.
        .target(
            name: "BGPolicySystem",
            dependencies: [
                "BGPolicyCore",
                "BGPolicyDBus",
                "CBGPolicyClock",
                "CBGPolicyThread",
                "CBGPolicyUdev",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strictSettings
        ),

        // SQLite through GRDB: registrations, pending requests, switches, history.
        .target(
            name: "BGPolicyStore",
            dependencies: [
                "BGPolicyCore",
                .product(name: "GRDB", package: "GRDB.swift"),
            ],
            swiftSettings: strictSettings
        ),

        // Wiring: D-Bus interfaces <-> core <-> sources <-> store; services and lifecycle.
        .target(
            name: "BGPolicyAgent",
            dependencies: [
                "BGPolicyCore",
                "BGPolicyDBus",
                "BGPolicySystem",
                "BGPolicyStore",
                "CBGPolicyRuntime",
                "CBGPolicyThread",
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strictSettings
        ),

        .executableTarget(
            name: "bgpolicyd",
            dependencies: [
                "BGPolicyAgent",
                "BGPolicyCore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "bgpolicy",
            dependencies: [
                "BGPolicyCore",
                "BGPolicyDBus",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strictSettings
        ),

        // The client library for Swift apps (BGTaskScheduler-like), and an example app using it.
        .target(
            name: "BackgroundTasks",
            dependencies: ["BGPolicyCore", "BGPolicyDBus"],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "feed-reader",
            dependencies: [
                "BackgroundTasks",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Examples/FeedReader/Sources",
            swiftSettings: strictSettings
        ),

        // Test tools: a peer that exports every D-Bus type for interop tests,
        // the seeded fuzzer, and the benchmark driver. Not installed.
        .executableTarget(
            name: "bgpolicy-testpeer",
            dependencies: ["BGPolicyDBus"],
            path: "Tests/Tools/TestPeer",
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "bgpolicy-fuzz",
            dependencies: ["BGPolicyDBus"],
            path: "Tests/Tools/Fuzz",
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "bgpolicy-bench",
            dependencies: ["BGPolicyDBus", "BGPolicyCore", "BGPolicyStore", .product(name: "GRDB", package: "GRDB.swift")],
            path: "Tests/Tools/Bench",
            swiftSettings: strictSettings
        ),

        .testTarget(name: "BGPolicyCoreTests", dependencies: ["BGPolicyCore", "BGPolicyTestSupport"], swiftSettings: strictSettings),
        // A private dbus-daemon for the tests that need a real bus.
        .target(name: "BGPolicyTestSupport", path: "Tests/Support", swiftSettings: strictSettings),
        .testTarget(name: "BGPolicyDBusTests", dependencies: ["BGPolicyDBus", "BGPolicyTestSupport"], swiftSettings: strictSettings),
        .testTarget(
            name: "BGPolicySystemTests",
            dependencies: ["BGPolicySystem", "BGPolicyCore", "BGPolicyDBus", "BGPolicyTestSupport", .product(name: "Logging", package: "swift-log")],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "BGPolicyStoreTests",
            // GRDB for a second connection to a store's file, as another process would hold.
            dependencies: ["BGPolicyStore", "BGPolicyCore", .product(name: "GRDB", package: "GRDB.swift")],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "BackgroundTasksTests",
            dependencies: ["BackgroundTasks", "BGPolicyCore", "BGPolicyDBus", "BGPolicyTestSupport"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "BGPolicyAgentTests",
            dependencies: [
                "BGPolicyAgent", "BGPolicyCore", "BGPolicyDBus", "BGPolicyStore", "BGPolicySystem", "BGPolicyTestSupport",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
    ]
)
