// swift-tools-version: 6.1
import PackageDescription

/// One set of settings for every target: Swift 6 language mode with complete strict concurrency.
let swiftSettings: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "Herald",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Herald", targets: ["Herald"]),
        .library(name: "HeraldTesting", targets: ["HeraldTesting"]),
        .library(name: "SocketReceiver", targets: ["SocketReceiver"]),
        .library(name: "HTTPReceiver", targets: ["HTTPReceiver"]),
        .library(name: "EchoHandler", targets: ["EchoHandler"]),
        .library(name: "PrometheusMetrics", targets: ["PrometheusMetrics"]),
        .library(name: "JSONLExport", targets: ["JSONLExport"]),
        .library(name: "TokenWebhook", targets: ["TokenWebhook"]),
        .library(name: "ExecFetchWorker", targets: ["ExecFetchWorker"]),
        .library(name: "NATSReceiver", targets: ["NATSReceiver"]),
        .executable(name: "herald", targets: ["herald"]),
        .library(name: "HeraldSQLite", targets: ["HeraldSQLite"]),
        // Dynamic plugins: the loader a host links, and the kit a plugin (a shared object) is written with.
        .library(name: "HeraldDynamicPlugins", targets: ["HeraldDynamicPlugins"]),
        .library(name: "HeraldPluginKit", targets: ["HeraldPluginKit"]),
        .library(name: "HeraldExamplePlugin", type: .dynamic, targets: ["HeraldExamplePlugin"]),
        // Shared objects the dynamic-plugin tests load (a product is the only way SwiftPM builds a .so).
        .library(name: "HeraldTestPlugin", type: .dynamic, targets: ["HeraldTestPlugin"]),
        .library(name: "HeraldTestPluginSerial", type: .dynamic, targets: ["HeraldTestPluginSerial"]),
        .library(name: "HeraldTestPluginBadABI", type: .dynamic, targets: ["HeraldTestPluginBadABI"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/x-sheep/swift-property-based", from: "2.0.1"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/jpsim/Yams", from: "6.2.2"),
    ],
    targets: [
        .systemLibrary(
            name: "CLibUV",
            path: "Sources/CLibUV",
            pkgConfig: "libuv",
            providers: [.apt(["libuv1-dev"])]
        ),
        .systemLibrary(
            name: "CSystemd",
            path: "Sources/CSystemd",
            pkgConfig: "libsystemd",
            providers: [.apt(["libsystemd-dev"])]
        ),
        .target(
            name: "Herald",
            dependencies: [
                "CLibUV",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "HeraldSQLite",
            dependencies: ["Herald", .product(name: "GRDB", package: "GRDB.swift"), .product(name: "GRDBSQLite", package: "GRDB.swift")],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "HeraldTesting",
            dependencies: ["Herald", .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        .systemLibrary(
            name: "CHTTPParser",
            path: "Sources/CHTTPParser",
            providers: [.apt(["libhttp-parser-dev"])]
        ),
        // First-party plugins: one target each, under Plugins/<Name>.
        .target(
            name: "HTTPReceiver",
            dependencies: ["Herald", "CHTTPParser"],
            path: "Plugins/HTTPReceiver",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "SocketReceiver",
            dependencies: ["Herald"],
            path: "Plugins/SocketReceiver",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "PrometheusMetrics",
            dependencies: [
                "Herald",
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            path: "Plugins/PrometheusMetrics",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "EchoHandler",
            dependencies: ["Herald"],
            path: "Plugins/EchoHandler",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "JSONLExport",
            dependencies: ["Herald"],
            path: "Plugins/JSONLExport",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "TokenWebhook",
            dependencies: ["Herald"],
            path: "Plugins/TokenWebhook",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "ExecFetchWorker",
            dependencies: ["Herald", "CLibUV", .product(name: "Logging", package: "swift-log")],
            path: "Plugins/ExecFetchWorker",
            swiftSettings: swiftSettings
        ),
        // The NATS C client (Debian's libnats-dev) with its libuv adapter compiled once, for NATSReceiver. Not linked:
        // loader.c loads libnats with dlopen when a NATS function is first called (scripts/generate-nats-loader).
        .target(
            name: "CNATS",
            dependencies: ["CLibUV"],
            path: "Sources/CNATS"
        ),
        .target(
            name: "NATSReceiver",
            dependencies: ["Herald", "CNATS", "CLibUV", .product(name: "Logging", package: "swift-log")],
            path: "Plugins/NATSReceiver",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "herald",
            dependencies: [
                "Herald",
                "HeraldSQLite",
                "HTTPReceiver",
                "SocketReceiver",
                "EchoHandler",
                "JSONLExport",
                "PrometheusMetrics",
                "CSystemd",
                "HeraldDynamicPlugins",
                "NATSReceiver",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Yams", package: "Yams"),
            ],
            swiftSettings: swiftSettings,
            // As for HeraldDynamicPluginsTests: under TSan, export the TSan entry points a TSan-built Swift plugin
            // calls, so `herald serve --plugin` can dlopen it in the sanitizer run. Does nothing without TSan.
            linkerSettings: [.unsafeFlags([
                "__tsan_external_read", "__tsan_external_write", "__tsan_ignore_thread_begin", "__tsan_ignore_thread_end",
            ].flatMap { ["-Xlinker", "--export-dynamic-symbol=\($0)"] }, .when(platforms: [.linux]))]
        ),
        .executableTarget(
            name: "LoopEcho",
            dependencies: ["Herald"],
            path: "Examples/LoopEcho",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "EchoReceiver",
            dependencies: ["Herald", "SocketReceiver"],
            path: "Examples/EchoReceiver",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "WeatherDaemon",
            dependencies: [
                "Herald", "HeraldSQLite", "SocketReceiver", "HTTPReceiver",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Examples/WeatherDaemon",
            swiftSettings: swiftSettings
        ),
        // The child process of the crash-safety test: accepts messages, is killed, recovers.
        .executableTarget(
            name: "CrashProbe",
            dependencies: ["Herald", "HeraldSQLite"],
            path: "Tests/CrashProbe",
            swiftSettings: swiftSettings
        ),
        // The child process of the NATS crash test: a daemon of the fleet, killed mid-stream and restarted.
        .executableTarget(
            name: "NATSProbe",
            dependencies: ["Herald", "HeraldSQLite", "NATSReceiver"],
            path: "Tests/NATSProbe",
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldTests",
            dependencies: [
                "Herald", "HeraldTesting", .product(name: "PropertyBased", package: "swift-property-based"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            exclude: ["Resources"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldSQLiteTests",
            dependencies: ["Herald", "HeraldSQLite", "HeraldTesting", "CrashProbe", "herald"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SocketReceiverTests",
            dependencies: ["Herald", "HeraldTesting", "SocketReceiver"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HTTPReceiverTests",
            dependencies: ["Herald", "HeraldTesting", "HTTPReceiver"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "PrometheusMetricsTests",
            dependencies: ["Herald", "HeraldTesting", "PrometheusMetrics", "SocketReceiver"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldCommandTests",
            dependencies: ["Herald", "HeraldTesting", "EchoHandler", "herald"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "WeatherDaemonTests",
            dependencies: ["Herald", "HeraldTesting", "WeatherDaemon", "herald"],
            swiftSettings: swiftSettings
        ),
        // Runs EchoReceiver and LoopEcho as child processes (WeatherDaemonTests runs WeatherDaemon).
        .testTarget(
            name: "ExamplesTests",
            dependencies: ["Herald", "HeraldTesting", "EchoReceiver", "LoopEcho"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "JSONLExportTests",
            dependencies: ["Herald", "HeraldTesting", "JSONLExport"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "ExecFetchWorkerTests",
            dependencies: ["Herald", "HeraldTesting", "ExecFetchWorker", .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "NATSReceiverTests",
            dependencies: ["Herald", "HeraldSQLite", "HeraldTesting", "NATSReceiver", "NATSProbe", "herald"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "TokenWebhookTests",
            dependencies: ["Herald", "HeraldTesting", "TokenWebhook"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldTestingTests",
            dependencies: ["Herald", "HeraldTesting"],
            swiftSettings: swiftSettings
        ),
        // Dynamic plugins: the C ABI (a header), the host's loader, the plugin author's kit, the example plugin.
        // The kit does not depend on Herald: a plugin links its own copy of what it imports.
        .target(
            name: "CHeraldPluginABI",
            path: "Sources/CHeraldPluginABI"
        ),
        .target(
            name: "HeraldDynamicPlugins",
            dependencies: ["Herald", "CHeraldPluginABI", .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "HeraldPluginKit",
            dependencies: ["CHeraldPluginABI"],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "HeraldExamplePlugin",
            dependencies: ["HeraldPluginKit"],
            path: "Examples/DynamicPlugin",
            swiftSettings: swiftSettings
        ),
        // C plugins for the tests: one that allows concurrent calls, the same one serial, one of ABI version 999.
        .target(
            name: "HeraldTestPlugin",
            dependencies: ["CHeraldPluginABI"],
            path: "Tests/DynamicPluginFixtures/Concurrent",
            publicHeadersPath: ".",
            cSettings: [.headerSearchPath("../Common")]
        ),
        .target(
            name: "HeraldTestPluginSerial",
            dependencies: ["CHeraldPluginABI"],
            path: "Tests/DynamicPluginFixtures/Serial",
            publicHeadersPath: ".",
            cSettings: [.headerSearchPath("../Common")]
        ),
        .target(
            name: "HeraldTestPluginBadABI",
            dependencies: ["CHeraldPluginABI"],
            path: "Tests/DynamicPluginFixtures/BadABI",
            publicHeadersPath: "."
        ),
        // The shared objects above are products, not linked in: `swift build --build-tests` builds them beside
        // the test bundle, where the tests dlopen them.
        .testTarget(
            name: "HeraldDynamicPluginsTests",
            dependencies: ["Herald", "HeraldTesting", "HeraldDynamicPlugins"],
            swiftSettings: swiftSettings,
            // Under --sanitize=thread the test bundle links the TSan runtime statically and exports only the symbols
            // of clang's list, which lacks some that Swift code built with TSan calls: a TSan-built Swift plugin then
            // fails to dlopen (undefined symbol: __tsan_external_write). Export those too (by name: gold takes no
            // globs). Without TSan the symbols do not exist and this does nothing.
            linkerSettings: [.unsafeFlags([
                "__tsan_external_read", "__tsan_external_write", "__tsan_ignore_thread_begin", "__tsan_ignore_thread_end",
            ].flatMap { ["-Xlinker", "--export-dynamic-symbol=\($0)"] }, .when(platforms: [.linux]))]
        ),
    ]
)
