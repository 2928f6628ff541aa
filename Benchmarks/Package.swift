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
                .plugin(name: "BenchmarkPlugin", package: "benchmark"),
            ]
        ),
        // The message path: bus dispatch to a no-op handler and FCM v1 decoding.
        .executableTarget(
            name: "MessagePath",
            dependencies: [
                .product(name: "Herald", package: "Herald"),
                .product(name: "HeraldSQLite", package: "Herald"),
                .product(name: "Benchmark", package: "benchmark"),
            ],
            path: "Benchmarks/MessagePath",
            swiftSettings: [.swiftLanguageMode(.v6)],
            plugins: [
                .plugin(name: "BenchmarkPlugin", package: "benchmark"),
            ]
        ),
    ]
)
