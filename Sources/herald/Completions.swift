import ArgumentParser
import HeraldDaemon

extension HeraldCommand {
    /// The program's entry point (`@main` finds it before `AsyncParsableCommand`'s): swift-argument-parser's own,
    /// except that `--generate-completion-script SHELL` prints its script with `herald serve`'s settings added. Those
    /// are read from the configuration schema rather than declared as options, so its generator does not see them
    /// (``ServeCompletions``).
    static func main() async {
        let arguments = Array(CommandLine.arguments.dropFirst())
        if let shell = ServeCompletions.requestedShell(arguments) {
            print(ServeCompletions.script(extending: completionScript(for: shell), shell: shell))
            return
        }
        await main(nil)
    }
}
