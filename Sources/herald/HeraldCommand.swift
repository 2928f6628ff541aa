import ArgumentParser
import Herald

@main
struct HeraldCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "herald",
        abstract: "Receive and handle push messages on Linux.",
        version: HeraldBuild.version
    )
}
