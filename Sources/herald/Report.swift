import ArgumentParser
import Glibc
import Herald
import HeraldDaemon
import HeraldReport
import HeraldSQLite

/// `herald report`: the delivery report of an instance, read from its analytics store (`DATA-DIR/analytics.sqlite`):
/// a table per analytics label and per UTC day on standard output, and with `--html FILE` the same as one
/// self-contained page with charts.
struct Report: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Print the delivery report: per analytics label and per day, received, impressions, opens, open rate, background fetch results and drops.",
        discussion: """
            Reads DATA-DIR/analytics.sqlite, which herald serve writes (it may be running). Days are UTC days; a message \
            counts on the day it arrived. Open rate = opens / impressions: only a presented notification can be opened. \
            With --html FILE the report is also written as one HTML page with a delivery funnel and a per-day chart, \
            which needs no network to view.
            """
    )

    @Option(name: .customLong("data-dir"), help: "The instance's data directory.")
    var dataDirectory: String = "herald-data"

    @Option(help: "How many days to show, up to and including today (UTC).")
    var days: Int = 7

    @Option(help: "Only the messages sent with this analytics label (fcm_options.analytics_label).")
    var label: String?

    @Option(help: ArgumentHelp("Also write the report as one self-contained HTML page to this file.", valueName: "file"))
    var html: String?

    @Flag(
        help: ArgumentHelp(
            "Fill a new analytics store in the data directory with a fixed demo data set first (scripts/report-screenshot).",
            visibility: .hidden))
    var demo = false

    func validate() throws {
        guard (1...3660).contains(days) else { throw ValidationError("--days must be 1 to 3660, not \(days)") }
        if let html, html.isEmpty { throw ValidationError("--html needs a file name") }
    }

    func run() async throws {
        let now = WallClock.nowMilliseconds()
        do {
            if demo { try await ReportDemo.write(directory: dataDirectory, now: now) }
            let report = try AnalyticsReport.read(directory: dataDirectory, days: days, label: label, now: now)
            if let html {
                try writeFileAtomically(html, Array(report.html(generatedAt: now).utf8))
            }
            writeText(report.table())
            if let html { writeLine("HTML report written to \(html)", to: 2) }
        } catch let error as CommandFailure {
            throw error
        } catch {
            throw CommandFailure(message: "herald: \(error)")
        }
    }
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename, so a reader (a browser, a
/// web server) never sees half a page.
func writeFileAtomically(_ path: String, _ bytes: [UInt8]) throws {
    let temporary = path + ".tmp-\(getpid())"
    let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    guard fd >= 0 else {
        throw CommandFailure(message: "herald: cannot write \(path): \(String(cString: strerror(errno)))")
    }
    var offset = 0
    var failure: Int32 = 0
    while offset < bytes.count {
        let written = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        if written < 0, errno == EINTR { continue }
        guard written > 0 else {
            failure = errno
            break
        }
        offset += written
    }
    if close(fd) != 0, failure == 0 { failure = errno }
    if failure == 0, rename(temporary, path) != 0 { failure = errno }
    if failure != 0 {
        unlink(temporary)
        throw CommandFailure(message: "herald: cannot write \(path): \(String(cString: strerror(failure)))")
    }
}

/// Writes `text` to standard output whole (no newline added).
func writeText(_ text: String) {
    let bytes = Array(text.utf8)
    var offset = 0
    while offset < bytes.count {
        let written = bytes[offset...].withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
        if written < 0, errno == EINTR { continue }
        guard written > 0 else { return }
        offset += written
    }
}
