import Foundation
import PackagePlugin

/// Gives the `herald` command the commit it is built from, for `herald --version`: before every build,
/// `scripts/build-info` asks git for the commit, its date and whether a release tag names it, and writes
/// `BuildInfo.swift` (rewritten only when that changes, so an unchanged commit recompiles nothing). Outside a git
/// checkout (a source archive) the file says so and `herald --version` prints the release version alone.
@main
struct HeraldBuildInfo: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        let output = context.pluginWorkDirectoryURL.appending(path: "generated")
        let package = context.package.directoryURL
        return [
            .prebuildCommand(
                displayName: "Reading the commit for herald --version",
                executable: URL(filePath: "/bin/sh"),
                arguments: [package.appending(path: "scripts/build-info").path(percentEncoded: false), package.path(percentEncoded: false),
                    output.appending(path: "BuildInfo.swift").path(percentEncoded: false)],
                outputFilesDirectory: output)
        ]
    }
}
