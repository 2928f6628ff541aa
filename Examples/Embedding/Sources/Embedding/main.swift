import Herald
import HeraldDaemon

/// A handler of this daemon's own: prints the data of each data message.
final class GreetingPrinter: MessageHandler {
    func didReceive(_ message: RemoteMessage) async throws {
        print("greeting: \(message.data["greeting"] ?? "none")")
    }
}

// `herald serve` with the printer added: the same flags, HERALD_* variables, config file, signals and systemd.
var daemon = Daemon()
daemon.addPlugin { _ in GreetingPrinter() }
await daemon.main()
