// swift-tools-version: 6.1
import PackageDescription

// The targets are listed bottom-up, each depending only on targets above it:
//
//   C shims ─ HeraldEventLoop ─ HeraldJSON ─ Herald ─ adapters (SQLite, report, dynamic plugins, testing)
//     ─ plugins (Plugins/<Name>) ─ the `herald` command ─ examples ─ test fixtures and tests.

/// One set of settings for every target: Swift 6 language mode with complete strict concurrency.
let swiftSettings: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

/// Under --sanitize=thread a binary links the TSan runtime statically and exports only the symbols of clang's list,
/// which lacks some that Swift code built with TSan calls: a TSan-built Swift plugin then fails to dlopen (undefined
/// symbol: __tsan_external_write). A binary that loads plugins exports those too (by name: gold takes no globs).
/// Without TSan the symbols do not exist and this does nothing.
let exportTSanEntryPoints: [LinkerSetting] = [
    .unsafeFlags(
        [
            "__tsan_external_read", "__tsan_external_write", "__tsan_ignore_thread_begin", "__tsan_ignore_thread_end",
        ].flatMap { ["-Xlinker", "--export-dynamic-symbol=\($0)"] }, .when(platforms: [.linux]))
]

let package = Package(
    name: "Herald",
    platforms: [.macOS(.v15)],
    products: [
        // The SDK: `import Herald` brings the event loop and the JSON library with it.
        .library(name: "Herald", targets: ["Herald"]),
        .library(name: "HeraldEventLoop", targets: ["HeraldEventLoop"]),
        .library(name: "HeraldJSON", targets: ["HeraldJSON"]),
        // The HTTP server layer (sessions, routes, limits) under every HTTP listener.
        .library(name: "HeraldHTTP", targets: ["HeraldHTTP"]),
        .library(name: "HeraldTLS", targets: ["HeraldTLS"]),
        // Adapters.
        .library(name: "HeraldSQLite", targets: ["HeraldSQLite"]),
        .library(name: "HeraldReport", targets: ["HeraldReport"]),
        .library(name: "HeraldTesting", targets: ["HeraldTesting"]),
        .library(name: "HeraldHTTPClient", targets: ["HeraldHTTPClient"]),
        // Dynamic plugins: the loader a host links, and the kit a plugin (a shared object) is written with.
        .library(name: "HeraldDynamicPlugins", targets: ["HeraldDynamicPlugins"]),
        .library(name: "HeraldPluginKit", targets: ["HeraldPluginKit"]),
        // First-party plugins.
        .library(name: "HeraldHTTPReceiver", targets: ["HeraldHTTPReceiver"]),
        .library(name: "HeraldSocketReceiver", targets: ["HeraldSocketReceiver"]),
        .library(name: "HeraldNATSReceiver", targets: ["HeraldNATSReceiver"]),
        .library(name: "HeraldEchoHandler", targets: ["HeraldEchoHandler"]),
        .library(name: "HeraldPrometheusMetrics", targets: ["HeraldPrometheusMetrics"]),
        .library(name: "HeraldJSONLExport", targets: ["HeraldJSONLExport"]),
        .library(name: "HeraldTokenWebhook", targets: ["HeraldTokenWebhook"]),
        .library(name: "HeraldExecFetchWorker", targets: ["HeraldExecFetchWorker"]),
        .library(name: "HeraldDesktopPresenter", targets: ["HeraldDesktopPresenter"]),
        .library(name: "HeraldImageAttachment", targets: ["HeraldImageAttachment"]),
        .library(name: "HeraldUnifiedPush", targets: ["HeraldUnifiedPush"]),
        // The daemon: `herald serve` as a library an embedder adds its own plugins to, and the `herald` command.
        .library(name: "HeraldDaemon", targets: ["HeraldDaemon"]),
        .executable(name: "herald", targets: ["herald"]),
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
        // Builds the DocC catalogs (scripts/docs); a command plugin, linked into nothing.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        // MARK: C shims: system libraries and the plugin ABI.

        // libuv, the event loop's only dependency.
        .systemLibrary(
            name: "CLibUV",
            path: "Sources/CLibUV",
            pkgConfig: "libuv",
            providers: [.apt(["libuv1-dev"])]
        ),
        // sd_notify, for `herald serve` under systemd.
        .systemLibrary(
            name: "CSystemd",
            path: "Sources/CSystemd",
            pkgConfig: "libsystemd",
            providers: [.apt(["libsystemd-dev"])]
        ),
        // zlib's CRC-32, the checksum of each frame of the inbox's log file (HeraldSQLite's `InboxLog`).
        .systemLibrary(
            name: "CZlib",
            path: "Sources/CZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"])]
        ),
        // The HTTP/1.1 parser of HeraldHTTP's session.
        .systemLibrary(
            name: "CHTTPParser",
            path: "Sources/CHTTPParser",
            providers: [.apt(["libhttp-parser-dev"])]
        ),
        // libcurl, the outgoing HTTP client's transport (HTTP/1.1, HTTP/2, TLS with OpenSSL), loaded with dlopen the
        // first time it is used (Sources/CCurl/loader.c): an idle daemon never maps it nor its dependencies.
        .target(
            name: "CCurl",
            path: "Sources/CCurl"
        ),
        // nghttp2, the HTTP/2 framing (HPACK, flow control, the protocol's checks) of the HTTP server sessions.
        .systemLibrary(
            name: "CNGHTTP2",
            path: "Sources/CNGHTTP2",
            pkgConfig: "libnghttp2",
            providers: [.apt(["libnghttp2-dev"])]
        ),
        // OpenSSL 3's libssl and libcrypto: TLS on Herald's listeners, and the keys and signatures Herald checks
        // (RS256 service-account assertions, ES256 APNs provider tokens and VAPID, SHA-256), all in HeraldTLS.
        .systemLibrary(
            name: "COpenSSL",
            path: "Sources/COpenSSL",
            pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"])]
        ),
        // The NATS C client (Debian's libnats-dev) with its libuv adapter compiled once, for the NATS receiver. Not
        // linked: loader.c loads libnats with dlopen when a NATS function is first called (scripts/generate-nats-loader).
        .target(
            name: "CNATS",
            dependencies: ["CLibUV"],
            path: "Sources/CNATS"
        ),
        // The C ABI between Herald and a dynamic plugin (a header).
        .target(
            name: "CHeraldPluginABI",
            path: "Sources/CHeraldPluginABI"
        ),

        // MARK: The runtime and the JSON library: nothing of Herald's above them.

        // The libuv runtime: the loop and its executors, streams, timers, signals, the blocking pool, locks.
        .target(
            name: "HeraldEventLoop",
            dependencies: ["CLibUV"],
            swiftSettings: swiftSettings
        ),
        // The strict JSON parser and writer (JSONValue, JSONObject): the one JSON implementation.
        .target(
            name: "HeraldJSON",
            swiftSettings: swiftSettings
        ),

        // TLS for the loop's stream connections: OpenSSL through memory BIOs, on the connection's own loop.
        .target(
            name: "HeraldTLS",
            dependencies: ["HeraldEventLoop", "COpenSSL", "CLibUV", .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),

        // The HTTP server layer: requests, responses, the route table, limits, the HTTP/1.1 session on
        // http_parser and the HTTP/2 session on nghttp2. Protocol-neutral above the sessions, and nothing of
        // Herald's bus.
        .target(
            name: "HeraldHTTP",
            dependencies: ["HeraldEventLoop", "HeraldJSON", "CHTTPParser", "CNGHTTP2"],
            swiftSettings: swiftSettings
        ),

        // MARK: Herald: the message model, the roles plugins take, the bus, the store protocol.

        .target(
            name: "Herald",
            dependencies: [
                "HeraldEventLoop",
                "HeraldJSON",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),

        // MARK: Adapters.

        // The durable store on SQLite: identity, topics, the inbox, the de-duplication window; the analytics sink.
        .target(
            name: "HeraldSQLite",
            dependencies: [
                "Herald", "HeraldEventLoop", "CZlib", .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
            ],
            swiftSettings: swiftSettings
        ),
        // The analytics report read from the sink's file, as text and as a self-contained HTML page (`herald report`).
        .target(
            name: "HeraldReport",
            dependencies: ["Herald", "HeraldSQLite", .product(name: "GRDB", package: "GRDB.swift")],
            swiftSettings: swiftSettings
        ),
        // The outgoing HTTP client: libcurl's multi-socket API driven by the loop (TokenWebhook, herald send and topics).
        .target(
            name: "HeraldHTTPClient",
            dependencies: ["HeraldEventLoop", "CCurl", "CLibUV"],
            swiftSettings: swiftSettings
        ),
        // Loads handler plugins built as shared objects (dlopen) and registers them with a Herald.
        .target(
            name: "HeraldDynamicPlugins",
            dependencies: ["Herald", "CHeraldPluginABI", .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        // What a dynamic plugin is written with. It does not depend on Herald: a plugin links its own copy of what
        // it imports, and the JSON library is all it needs.
        .target(
            name: "HeraldPluginKit",
            dependencies: ["HeraldJSON", "CHeraldPluginABI"],
            swiftSettings: swiftSettings
        ),
        // For tests of an app built on Herald: an in-memory receiver, manual time, child processes, waiting on events.
        .target(
            name: "HeraldTesting",
            dependencies: ["Herald", "HeraldEventLoop", .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),

        // A D-Bus connection with sd-bus on the Herald loop (calls, signals, served objects): the desktop presenter's
        // and the UnifiedPush distributor's. Its API is `package`: shared by the plugins, not published.
        .target(
            name: "HeraldDBus",
            dependencies: ["HeraldEventLoop", "CLibUV", "CSystemd"],
            swiftSettings: swiftSettings
        ),

        // MARK: First-party plugins: one module each, under Plugins/<Name>.

        // Receivers: the FCM/APNs-compatible HTTP API, newline-delimited JSON on a Unix socket, a NATS fleet.
        .target(
            name: "HeraldHTTPReceiver",
            dependencies: ["Herald", "HeraldHTTP", "HeraldTLS"],
            path: "Plugins/HTTPReceiver",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "HeraldSocketReceiver",
            dependencies: ["Herald", "HeraldTLS"],
            path: "Plugins/SocketReceiver",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "HeraldNATSReceiver",
            dependencies: ["Herald", "HeraldHTTPReceiver", "CNATS", "CLibUV", .product(name: "Logging", package: "swift-log")],
            path: "Plugins/NATSReceiver",
            swiftSettings: swiftSettings
        ),
        // Handlers, sinks and workers.
        .target(
            name: "HeraldEchoHandler",
            dependencies: ["Herald"],
            path: "Plugins/EchoHandler",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "HeraldPrometheusMetrics",
            dependencies: [
                "Herald",
                "HeraldHTTP",
                "HeraldTLS",
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            path: "Plugins/PrometheusMetrics",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "HeraldJSONLExport",
            dependencies: ["Herald"],
            path: "Plugins/JSONLExport",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "HeraldTokenWebhook",
            dependencies: ["Herald", "HeraldHTTPClient"],
            path: "Plugins/TokenWebhook",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "HeraldExecFetchWorker",
            dependencies: ["Herald", "CLibUV", .product(name: "Logging", package: "swift-log")],
            path: "Plugins/ExecFetchWorker",
            swiftSettings: swiftSettings
        ),
        // Notifications on the Linux desktop: org.freedesktop.Notifications over sd-bus, on the Herald loop.
        .target(
            name: "HeraldDesktopPresenter",
            dependencies: ["Herald", "HeraldDBus", .product(name: "Logging", package: "swift-log")],
            path: "Plugins/DesktopPresenter",
            swiftSettings: swiftSettings
        ),
        // A content modifier: downloads a notification's image (fcm_options.image) and attaches it.
        .target(
            name: "HeraldImageAttachment",
            dependencies: ["Herald", "HeraldHTTPClient", .product(name: "Logging", package: "swift-log")],
            path: "Plugins/ImageAttachment",
            swiftSettings: swiftSettings
        ),
        // UnifiedPush on the Linux desktop: the distributor on the session bus (HeraldDBus), the Web Push endpoints
        // behind the HTTP receiver, registrations and waiting pushes in the SQLite store.
        .target(
            name: "HeraldUnifiedPush",
            dependencies: [
                "Herald", "HeraldDBus", "HeraldHTTPReceiver", "HeraldSQLite", .product(name: "Logging", package: "swift-log"),
            ],
            path: "Plugins/UnifiedPush",
            swiftSettings: swiftSettings
        ),

        // MARK: The daemon: `herald serve` as a library, and the command over it.

        // The daemon: its settings (schema, file, environment, flags, reload), the bundled plugins' registration, the
        // lifecycle (signals, sd_notify, the data directory's lock), and an embedder's own plugins added to them.
        .target(
            name: "HeraldDaemon",
            dependencies: [
                "Herald",
                "HeraldSQLite",
                "HeraldDynamicPlugins",
                "HeraldHTTPReceiver",
                "HeraldSocketReceiver",
                "HeraldNATSReceiver",
                "HeraldEchoHandler",
                "HeraldExecFetchWorker",
                "HeraldTokenWebhook",
                "HeraldJSONLExport",
                "HeraldPrometheusMetrics",
                "HeraldDesktopPresenter",
                "HeraldTLS",
                "HeraldImageAttachment",
                "HeraldUnifiedPush",
                "CSystemd",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Yams", package: "Yams"),
            ],
            swiftSettings: swiftSettings
        ),
        // The command: `herald serve` (over HeraldDaemon), `send`, `token`, `topics`, `report`, `quarantine`.
        .executableTarget(
            name: "herald",
            dependencies: [
                "Herald",
                "HeraldDaemon",
                "HeraldSQLite",
                "HeraldReport",
                "HeraldHTTPReceiver",
                "HeraldNATSReceiver",
                "HeraldHTTPClient",
                "HeraldTLS",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings,
            // As for HeraldDynamicPluginsTests: `herald serve --plugin` can dlopen a TSan-built plugin in the
            // sanitizer run.
            linkerSettings: exportTSanEntryPoints,
            plugins: ["HeraldBuildInfo"]
        ),
        // Before each build, the commit `herald` is built from, for `herald --version` (scripts/build-info).
        .plugin(name: "HeraldBuildInfo", capability: .buildTool(), path: "BuildTools/HeraldBuildInfo"),

        // MARK: Examples.

        .executableTarget(
            name: "LoopEcho",
            dependencies: ["Herald"],
            path: "Examples/LoopEcho",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "EchoReceiver",
            dependencies: ["Herald", "HeraldSocketReceiver"],
            path: "Examples/EchoReceiver",
            swiftSettings: swiftSettings
        ),
        // A desktop daemon: the desktop presenter, a category with actions and a text reply, the responses printed.
        .executableTarget(
            name: "DesktopNotifier",
            dependencies: ["Herald", "HeraldDesktopPresenter", "HeraldSocketReceiver"],
            path: "Examples/DesktopNotifier",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "WeatherDaemon",
            dependencies: [
                "Herald", "HeraldSQLite", "HeraldSocketReceiver", "HeraldHTTPReceiver",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Examples/WeatherDaemon",
            swiftSettings: swiftSettings
        ),
        // A handler plugin built as a shared object with HeraldPluginKit.
        .target(
            name: "HeraldExamplePlugin",
            dependencies: ["HeraldPluginKit"],
            path: "Examples/DynamicPlugin",
            swiftSettings: swiftSettings
        ),

        // MARK: Test fixtures: child processes and plugins the tests run.

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
            dependencies: ["Herald", "HeraldSQLite", "HeraldNATSReceiver"],
            path: "Tests/NATSProbe",
            swiftSettings: swiftSettings
        ),
        // C plugins for the tests: one that allows concurrent calls, the same one serial, one of ABI version 999.
        // They are products, not linked in: `swift build --build-tests` builds them beside the test bundle, where
        // the tests dlopen them.
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

        // MARK: Tests: one target per module (Tests/<Module>Tests), and the command's.

        .testTarget(
            name: "HeraldEventLoopTests",
            dependencies: ["HeraldEventLoop", "HeraldTesting"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldTLSTests",
            dependencies: ["HeraldTLS", "HeraldEventLoop", "HeraldTesting", .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldJSONTests",
            dependencies: ["HeraldJSON", "HeraldTesting"],
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
            dependencies: ["Herald", "HeraldSQLite", "HeraldReport", "HeraldTesting", "CrashProbe", "herald"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldReportTests",
            dependencies: ["Herald", "HeraldSQLite", "HeraldReport", "HeraldTesting", "herald"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldHTTPClientTests",
            dependencies: ["HeraldHTTPClient", "HeraldTesting"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldDynamicPluginsTests",
            dependencies: ["Herald", "HeraldTesting", "HeraldDynamicPlugins"],
            swiftSettings: swiftSettings,
            // The tests load a TSan-built Swift plugin in the sanitizer run (see exportTSanEntryPoints).
            linkerSettings: exportTSanEntryPoints
        ),
        // Linked into the test process only: how many tests Swift Testing runs at once (see its source).
        .target(name: "TestParallelism", path: "Tests/TestParallelism"),
        .testTarget(
            name: "HeraldTestingTests",
            dependencies: ["Herald", "HeraldTesting", "TestParallelism"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldHTTPTests",
            dependencies: ["HeraldHTTP", "HeraldTesting"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldHTTPReceiverTests",
            dependencies: [
                "Herald", "HeraldTesting", "HeraldHTTPReceiver", "HeraldTLS",
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldSocketReceiverTests",
            dependencies: ["Herald", "HeraldTesting", "HeraldSocketReceiver", "HeraldTLS"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldNATSReceiverTests",
            dependencies: ["Herald", "HeraldSQLite", "HeraldTesting", "HeraldNATSReceiver", "NATSProbe", "herald"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldPrometheusMetricsTests",
            dependencies: ["Herald", "HeraldTesting", "HeraldPrometheusMetrics", "HeraldSocketReceiver", "HeraldTLS"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldJSONLExportTests",
            dependencies: ["Herald", "HeraldTesting", "HeraldJSONLExport"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldTokenWebhookTests",
            dependencies: ["Herald", "HeraldTesting", "HeraldTokenWebhook"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldExecFetchWorkerTests",
            dependencies: ["Herald", "HeraldTesting", "HeraldExecFetchWorker", .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldDesktopPresenterTests",
            dependencies: [
                "Herald", "HeraldTesting", "HeraldDesktopPresenter", "HeraldDBus", "herald", "DesktopNotifier",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldUnifiedPushTests",
            dependencies: [
                "Herald", "HeraldTesting", "HeraldUnifiedPush", "HeraldHTTPReceiver", "HeraldSQLite", "HeraldReport", "HeraldJSONLExport",
                "HeraldPrometheusMetrics", "HeraldNATSReceiver",
                "herald", "HeraldTLS", .product(name: "Logging", package: "swift-log"),
            ],
            exclude: ["Resources"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldImageAttachmentTests",
            dependencies: ["Herald", "HeraldTesting", "HeraldImageAttachment", .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldCommandTests",
            dependencies: ["Herald", "HeraldTesting", "HeraldEchoHandler", "HeraldSocketReceiver", "HeraldDaemon", "herald"],
            swiftSettings: swiftSettings
        ),
        // Daemons started in the test process with a plugin of the test's own.
        .testTarget(
            name: "HeraldDaemonTests",
            dependencies: ["Herald", "HeraldDaemon", "HeraldSQLite", "HeraldTesting", .product(name: "Logging", package: "swift-log")],
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
    ]
)
