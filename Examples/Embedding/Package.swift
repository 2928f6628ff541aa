// swift-tools-version: 6.1
import PackageDescription

// A daemon that embeds Herald: `herald serve` with a handler of its own added. It depends on Herald as any package
// does; here by path, the checkout it sits in, where a package of its own names the repository's URL:
//
//     .package(url: "https://github.com/<owner>/herald", from: "0.1.0")
//
// scripts/check-embedding builds and runs it.
let package = Package(
    name: "Embedding",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "herald", path: "../..")
    ],
    targets: [
        .executableTarget(
            name: "Embedding",
            dependencies: [
                .product(name: "Herald", package: "herald"),
                .product(name: "HeraldDaemon", package: "herald"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        )
    ]
)
