// swift-tools-version: 6.1
// Benchmarks for Herald, kept out of the main package graph: nothing in ../Package.swift refers to this
// package, so building or testing Herald never fetches ordo-one/benchmark or SwiftNIO.
import PackageDescription

let package = Package(
    name: "HeraldBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "Herald", path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark", exact: "1.38.1", traits: ["MallocInterposer"]),
        .package(url: "https://github.com/apple/swift-nio", exact: "2.101.3"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.34.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
    ],
    targets: [
        // Herald's EventLoop beside SwiftNIO's MultiThreadedEventLoopGroup(numberOfThreads: 1), in one run.
        .executableTarget(
            name: "LoopComparison",
            dependencies: [
                .product(name: "Herald", package: "Herald"),
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            path: "Benchmarks/LoopComparison",
            swiftSettings: [.swiftLanguageMode(.v6)],
            plugins: [
                .plugin(name: "BenchmarkPlugin", package: "benchmark")
            ]
        ),
        // Fixtures shared by the benchmark targets: the sample body, the bus fixture, a no-op handler and sink.
        .target(
            name: "BenchmarkSupport",
            dependencies: [
                .product(name: "Herald", package: "Herald"),
                .product(name: "HeraldSQLite", package: "Herald"),
                .product(name: "HeraldJSONLExport", package: "Herald"),
                .product(name: "HeraldPrometheusMetrics", package: "Herald"),
            ],
            path: "Support/BenchmarkSupport",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // The allocation ratchet: allocations per message of the hot paths, checked in CI against the
        // committed thresholds in Thresholds/ (scripts/allocation-ratchet).
        .executableTarget(
            name: "Allocations",
            dependencies: [
                "BenchmarkSupport",
                .product(name: "Herald", package: "Herald"),
                .product(name: "Benchmark", package: "benchmark"),
            ],
            path: "Benchmarks/Allocations",
            swiftSettings: [.swiftLanguageMode(.v6)],
            plugins: [
                .plugin(name: "BenchmarkPlugin", package: "benchmark")
            ]
        ),
        // The message path: bus dispatch to a no-op handler and FCM v1 decoding.
        .executableTarget(
            name: "MessagePath",
            dependencies: [
                "BenchmarkSupport",
                .product(name: "Herald", package: "Herald"),
                .product(name: "HeraldSQLite", package: "Herald"),
                .product(name: "HeraldJSONLExport", package: "Herald"),
                .product(name: "HeraldPrometheusMetrics", package: "Herald"),
                .product(name: "Benchmark", package: "benchmark"),
            ],
            path: "Benchmarks/MessagePath",
            swiftSettings: [.swiftLanguageMode(.v6)],
            plugins: [
                .plugin(name: "BenchmarkPlugin", package: "benchmark")
            ]
        ),

        // Servers and load clients for the network scenarios, driven by scripts/peers, scripts/http-vs-hummingbird and
        // scripts/socket-vs-nio. They live under Servers/, not Benchmarks/, so the benchmark plugin does not
        // take them for benchmark targets.
        //
        // What every server and load client shares (output lines, options, files), with no dependencies.
        .target(
            name: "ServerSupport",
            path: "Servers/ServerSupport",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // The per-message work of every peer server: Herald's decode, the target check, a counting no-op handler.
        .target(
            name: "PeerSupport",
            dependencies: [
                .product(name: "Herald", package: "Herald")
            ],
            path: "Servers/PeerSupport",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // Herald with a no-op handler and an in-memory or durable store, behind its HTTPReceiver and/or SocketReceiver.
        .executableTarget(
            name: "HeraldServer",
            dependencies: [
                "ServerSupport",
                .product(name: "Herald", package: "Herald"),
                .product(name: "HeraldSQLite", package: "Herald"),
                .product(name: "HeraldHTTPReceiver", package: "Herald"),
                .product(name: "HeraldSocketReceiver", package: "Herald"),
            ],
            path: "Servers/HeraldServer",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // The HTTP peer: Hummingbird 2 routing POST /v1/projects/{p}/messages:send, decoding with Herald's decoder.
        .executableTarget(
            name: "HummingbirdServer",
            dependencies: [
                "PeerSupport",
                "ServerSupport",
                .product(name: "Herald", package: "Herald"),
                .product(name: "Hummingbird", package: "hummingbird"),
            ],
            path: "Servers/HummingbirdServer",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // The socket peer: SwiftNIO on a Unix socket, line framing, the same decode and a no-op handler.
        .executableTarget(
            name: "NIOSocketServer",
            dependencies: [
                "PeerSupport",
                "ServerSupport",
                .product(name: "Herald", package: "Herald"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOExtras", package: "swift-nio-extras"),
            ],
            path: "Servers/NIOSocketServer",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // The second HTTP peer: SwiftNIO's NIOHTTP1 server with the same route, decode, target check and no-op handler.
        .executableTarget(
            name: "NIOHTTPServer",
            dependencies: [
                "PeerSupport",
                "ServerSupport",
                .product(name: "Herald", package: "Herald"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            path: "Servers/NIOHTTPServer",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // Bus dispatch with and without analytics sinks, run under callgrind by scripts/profile-bus.
        .executableTarget(
            name: "BusProfile",
            dependencies: [
                "BenchmarkSupport",
                .product(name: "Herald", package: "Herald"),
                .product(name: "HeraldJSONLExport", package: "Herald"),
                .product(name: "HeraldPrometheusMetrics", package: "Herald"),
            ],
            path: "Servers/BusProfile",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // A group commit of the durable inbox per message: the daemon's store (its inbox log) beside SQLite rows.
        .executableTarget(
            name: "InboxLayouts",
            dependencies: [
                .product(name: "Herald", package: "Herald"),
                .product(name: "HeraldSQLite", package: "Herald"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ],
            path: "Servers/InboxLayouts",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // A pipelined JSON-lines client: N connections, each writing M lines while reading the answers.
        .executableTarget(
            name: "SocketLoad",
            dependencies: ["ServerSupport"],
            path: "Servers/SocketLoad",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
    ]
)
