// swift-tools-version: 6.1
// Fuzz targets for Herald, kept out of the main package graph like Benchmarks/: nothing in
// ../Package.swift refers to this package. Each executable is a libFuzzer target; scripts/fuzz builds them with
// `-Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library` and runs them on the seeds in Corpus/<target>.
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "HeraldFuzz",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "Herald", path: ".."),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/jpsim/Yams", from: "6.2.2"),
    ],
    targets: [
        // What more than one target needs: the fixed decoding context, splitting an input into chunks, and a
        // Herald with a receiver on a Unix socket that an input is sent to.
        .target(
            name: "FuzzSupport",
            dependencies: [
                .product(name: "Herald", package: "Herald"),
                .product(name: "HeraldTesting", package: "Herald"),
            ],
            swiftSettings: swiftSettings
        ),
        // FCMSendRequest.decode: the FCM v1 send body's decoder and validator.
        .executableTarget(
            name: "FuzzFCMv1",
            dependencies: ["FuzzSupport", .product(name: "Herald", package: "Herald")],
            swiftSettings: swiftSettings
        ),
        // APNsRequest.decode: the apns-* headers and the APNs payload.
        .executableTarget(
            name: "FuzzAPNs",
            dependencies: ["FuzzSupport", .product(name: "Herald", package: "Herald")],
            swiftSettings: swiftSettings
        ),
        // TopicCondition.parse: FCM's condition expressions.
        .executableTarget(
            name: "FuzzCondition",
            dependencies: ["FuzzSupport", .product(name: "Herald", package: "Herald")],
            swiftSettings: swiftSettings
        ),
        // The HTTP receiver's request path (http_parser, routing, limits, the decoders, the bus), driven over its
        // Unix socket with the input's bytes in the input's chunks.
        .executableTarget(
            name: "FuzzHTTP",
            dependencies: [
                "FuzzSupport",
                .product(name: "Herald", package: "Herald"),
                .product(name: "HeraldTesting", package: "Herald"),
                .product(name: "HeraldHTTPReceiver", package: "Herald"),
            ],
            swiftSettings: swiftSettings
        ),
        // The HTTP/2 server session (nghttp2, the session's limits and abuse counters) in memory: the input is the
        // client's bytes after the preface.
        .executableTarget(
            name: "FuzzHTTP2",
            dependencies: ["FuzzSupport", .product(name: "HeraldHTTP", package: "Herald")],
            swiftSettings: swiftSettings
        ),
        // The socket receiver's line framing (and the decoder and bus behind it), with arbitrary chunking.
        .executableTarget(
            name: "FuzzSocketFraming",
            dependencies: [
                "FuzzSupport",
                .product(name: "Herald", package: "Herald"),
                .product(name: "HeraldTesting", package: "Herald"),
                .product(name: "HeraldSocketReceiver", package: "Herald"),
            ],
            swiftSettings: swiftSettings
        ),
        // A server-side TLS connection (HeraldTLS) reading a client's first flight: the handshake, its failures, the
        // records, over a Unix socket with the input's bytes in the input's chunks.
        .executableTarget(
            name: "FuzzTLS",
            dependencies: [
                "FuzzSupport",
                .product(name: "HeraldEventLoop", package: "Herald"),
                .product(name: "HeraldTLS", package: "Herald"),
                .product(name: "HeraldTesting", package: "Herald"),
            ],
            swiftSettings: swiftSettings
        ),
        // The HTTP receiver's parsers of credentials and push headers: POST /token's JWT-bearer assertion, APNs provider
        // tokens, VAPID authorizations, the Web Push headers and the FCM proxy's CONNECT head, the first byte picking
        // one; tokens are also signed with the harness's keys from the input's claims (HeraldTLS).
        .executableTarget(
            name: "FuzzAuth",
            dependencies: [
                "FuzzSupport",
                .product(name: "Herald", package: "Herald"),
                .product(name: "HeraldHTTPReceiver", package: "Herald"),
                .product(name: "HeraldTLS", package: "Herald"),
            ],
            swiftSettings: swiftSettings
        ),
        // herald serve's config file loader. ServeConfiguration.swift is internal to the HeraldDaemon library, which
        // no other package can reach: Sources/FuzzConfig/ServeConfiguration.swift (and the files of settings it uses,
        // ServeSchema.swift, APNsKeySetting.swift and CategoriesConfiguration.swift) are symbolic links to those
        // files, so the loader is compiled here from the same file, not copied. The schema composes every bundled
        // plugin's settings, hence the plugins below.
        .executableTarget(
            name: "FuzzConfig",
            dependencies: [
                "FuzzSupport",
                .product(name: "Herald", package: "Herald"),
                .product(name: "HeraldDesktopPresenter", package: "Herald"),
                .product(name: "HeraldEchoHandler", package: "Herald"),
                .product(name: "HeraldExecFetchWorker", package: "Herald"),
                .product(name: "HeraldHTTPReceiver", package: "Herald"),
                .product(name: "HeraldImageAttachment", package: "Herald"),
                .product(name: "HeraldJSONLExport", package: "Herald"),
                .product(name: "HeraldNATSReceiver", package: "Herald"),
                .product(name: "HeraldPrometheusMetrics", package: "Herald"),
                .product(name: "HeraldSQLite", package: "Herald"),
                .product(name: "HeraldSocketReceiver", package: "Herald"),
                .product(name: "HeraldTokenWebhook", package: "Herald"),
                .product(name: "HeraldUnifiedPush", package: "Herald"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Yams", package: "Yams"),
            ],
            swiftSettings: swiftSettings
        ),
    ]
)
