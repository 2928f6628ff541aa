import ArgumentParser
import Glibc
import HeraldDaemon

/// `herald serve`: the daemon of the HeraldDaemon library with the bundled plugins only. SIGTERM or SIGINT stops it:
/// no new messages, in-flight ones finished within the grace period, exit 0. A bad setting exits 64 with its message
/// on standard error; any other failure exits 1.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: ServeArguments.abstract, discussion: ServeArguments.discussion())

    @OptionGroup var arguments: ServeArguments

    func run() async throws {
        do {
            try await Daemon().run(arguments, environment: processEnvironment())
        } catch let error as DaemonError where error.exitStatus == 64 {
            writeLine(error.message, to: STDERR_FILENO)
            throw ExitCode(64)
        } catch let error as DaemonError {
            throw CommandFailure(message: error.message)
        }
    }
}
