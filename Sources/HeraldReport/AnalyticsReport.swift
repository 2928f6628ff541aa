import GRDB
import Glibc
public import Herald
import HeraldSQLite

/// What `herald report` shows: per analytics label and per UTC day, the messages received, the impressions, the opens,
/// the open rate, the background fetch results and the drops by reason, read from a `SQLiteAnalyticsStore` file.
///
/// Definitions:
/// - A message counts on the UTC day it was **received** (its events' `receivedAt`), whatever day it was then presented
///   or opened, so that a day's open rate is about that day's messages. Events about no message (an invalid request's
///   `message_dropped`) count on their own day.
/// - **received**: messages with `notification_receive`; **impressions**: messages with `notification_foreground`
///   (presented); **opens**: messages with `notification_open` (the default or a custom action); **dismissals**:
///   messages with `notification_dismiss`. Each counts a message once (by message ID), however often its event was
///   recorded (a message replayed from the durable inbox after a crash is not received twice).
/// - **open rate**: opens ÷ impressions. Only a presented notification can be opened: data-only and silent messages
///   cannot, so dividing by received would mix them in. `nil` (shown as `–`) when there were no impressions.
/// - **background fetch** new data / no data / failed: messages by the combined `result` of their `background_fetch`.
/// - **drops**: `message_dropped` events by `reason` (`invalid`, `duplicate`, `expired`, `not_targeted`,
///   `rejected_backpressure`, `collapsed`, `store_failure`), each event counted: a message retried twice and dropped
///   twice as a duplicate is two drops.
/// - **UnifiedPush** pushes (events of type `AnalyticsEvent.unifiedPush`: Herald as the push service and distributor
///   of other apps) are counted apart, per UTC day of their arrival, never in the figures above: **accepted** (pushes
///   with `notification_receive`), **delivered** (pushes with `message_delivered`: their app took them) and their
///   drops by reason (`expired`, `collapsed` by a newer push with the same `Topic`, `unregistered`, ...).
public struct AnalyticsReport: Sendable, Equatable {
    /// The figures of one label (or all) over one day (or the whole range).
    public struct Figures: Sendable, Equatable {
        public var received = 0
        public var impressions = 0
        public var opens = 0
        public var dismissals = 0
        public var fetchNewData = 0
        public var fetchNoData = 0
        public var fetchFailed = 0
        /// The total duration of the timed `background_fetch` events, and how many there were.
        public var fetchMilliseconds: Int64 = 0
        public var timedFetches = 0
        /// `message_dropped` events by reason.
        public var drops: [String: Int] = [:]

        public init(
            received: Int = 0, impressions: Int = 0, opens: Int = 0, dismissals: Int = 0, fetchNewData: Int = 0, fetchNoData: Int = 0,
            fetchFailed: Int = 0, fetchMilliseconds: Int64 = 0, timedFetches: Int = 0, drops: [String: Int] = [:]
        ) {
            self.received = received
            self.impressions = impressions
            self.opens = opens
            self.dismissals = dismissals
            self.fetchNewData = fetchNewData
            self.fetchNoData = fetchNoData
            self.fetchFailed = fetchFailed
            self.fetchMilliseconds = fetchMilliseconds
            self.timedFetches = timedFetches
            self.drops = drops
        }

        /// Every drop, whatever its reason.
        public var dropped: Int { drops.values.reduce(0, +) }
        /// Messages that went through background fetch.
        public var fetches: Int { fetchNewData + fetchNoData + fetchFailed }
        /// Opens ÷ impressions; `nil` without impressions.
        public var openRate: Double? { impressions > 0 ? Double(opens) / Double(impressions) : nil }
        /// The mean background fetch duration in milliseconds; `nil` without timed fetches.
        public var averageFetchMilliseconds: Double? { timedFetches > 0 ? Double(fetchMilliseconds) / Double(timedFetches) : nil }
        /// The drops, known reasons first in their fixed order, then any other reason by name; reasons with no drop left out.
        public var dropsByReason: [(reason: String, count: Int)] {
            let known = AnalyticsEvent.DropReason.allCases.map(\.rawValue)
            let others = drops.keys.filter { !known.contains($0) }.sorted()
            return (known + others).compactMap { reason in drops[reason].flatMap { $0 > 0 ? (reason, $0) : nil } }
        }
        /// Nothing happened.
        public var isEmpty: Bool { self == Figures() }

        public static func + (lhs: Figures, rhs: Figures) -> Figures {
            var sum = lhs
            sum.received += rhs.received
            sum.impressions += rhs.impressions
            sum.opens += rhs.opens
            sum.dismissals += rhs.dismissals
            sum.fetchNewData += rhs.fetchNewData
            sum.fetchNoData += rhs.fetchNoData
            sum.fetchFailed += rhs.fetchFailed
            sum.fetchMilliseconds += rhs.fetchMilliseconds
            sum.timedFetches += rhs.timedFetches
            sum.drops.merge(rhs.drops, uniquingKeysWith: +)
            return sum
        }
    }

    /// The UnifiedPush figures of one day (or the whole range).
    public struct PushFigures: Sendable, Equatable {
        public var accepted = 0
        public var delivered = 0
        /// `message_dropped` events by reason.
        public var drops: [String: Int] = [:]

        public init(accepted: Int = 0, delivered: Int = 0, drops: [String: Int] = [:]) {
            self.accepted = accepted
            self.delivered = delivered
            self.drops = drops
        }

        /// Every drop, whatever its reason.
        public var dropped: Int { drops.values.reduce(0, +) }
        /// The drops, as ``Figures/dropsByReason`` orders them.
        public var dropsByReason: [(reason: String, count: Int)] { Figures(drops: drops).dropsByReason }
        /// Nothing happened.
        public var isEmpty: Bool { self == PushFigures() }

        public static func + (lhs: PushFigures, rhs: PushFigures) -> PushFigures {
            var sum = lhs
            sum.accepted += rhs.accepted
            sum.delivered += rhs.delivered
            sum.drops.merge(rhs.drops, uniquingKeysWith: +)
            return sum
        }
    }

    /// One UTC day's UnifiedPush figures.
    public struct PushDay: Sendable, Equatable {
        /// Days since 1970-01-01 (UTC).
        public var day: Int64
        /// `YYYY-MM-DD`.
        public var date: String { AnalyticsReport.date(ofDay: day) }
        public var figures: PushFigures

        public init(day: Int64, figures: PushFigures) {
            self.day = day
            self.figures = figures
        }
    }

    /// One UTC day's figures.
    public struct Day: Sendable, Equatable {
        /// Days since 1970-01-01 (UTC).
        public var day: Int64
        /// `YYYY-MM-DD`.
        public var date: String { AnalyticsReport.date(ofDay: day) }
        public var figures: Figures

        public init(day: Int64, figures: Figures) {
            self.day = day
            self.figures = figures
        }
    }

    /// One analytics label's figures: the days that had any, and the total.
    public struct LabelSection: Sendable, Equatable {
        /// The label (`fcm_options.analytics_label`); `nil` for messages sent without one.
        public var label: String?
        /// The days with any figure, oldest first.
        public var days: [Day]
        public var total: Figures

        /// The label as shown: itself, or `(no label)`.
        public var displayName: String { label ?? "(no label)" }
    }

    public static let millisecondsPerDay: Int64 = 86_400_000

    /// The file read.
    public var path: String
    /// The first and last day of the range (days since 1970, UTC), both included.
    public var firstDay: Int64
    public var lastDay: Int64
    /// The label asked for (`--label`), or `nil` for all.
    public var labelFilter: String?
    /// The labels with any figure: most received first, then by name; messages without a label last.
    public var labels: [LabelSection]
    /// Every day of the range, all labels together, with zeros for quiet days.
    public var daily: [Day]
    /// The whole range, all labels together.
    public var total: Figures
    /// The days of the range with UnifiedPush pushes, oldest first (none without a UnifiedPush distributor).
    public var unifiedPush: [PushDay] = []
    /// The UnifiedPush pushes of the whole range.
    public var unifiedPushTotal = PushFigures()

    /// The figures of `label` (`nil`: no label) on `date` (`YYYY-MM-DD`), or `nil` when it had none that day.
    public func figures(label: String?, date: String) -> Figures? {
        labels.first { $0.label == label }?.days.first { $0.date == date }?.figures
    }

    /// The total of `label` (`nil`: no label) over the range, or `nil` when it had none.
    public func total(label: String?) -> Figures? {
        labels.first { $0.label == label }?.total
    }

    /// Reads the report from `<directory>/analytics.sqlite` without changing it (it may be in use by a running
    /// daemon): the `days` UTC days up to and including the day of `now` (milliseconds since 1970), and the days after
    /// it that have events (a clock ahead), for `label` only when given.
    ///
    /// - Throws: `StoreError/cannotOpen(path:detail:)` when there is no such file or it cannot be read;
    ///   `StoreError/corrupt(path:detail:)` when it is not a Herald analytics store;
    ///   `StoreError/newerSchema(path:found:)` when a newer Herald wrote it.
    public static func read(directory: String, days: Int = 7, label: String? = nil, now: Int64 = WallClock.nowMilliseconds())
        throws(StoreError) -> AnalyticsReport
    {
        let path = SQLiteAnalyticsStore.path(inDirectory: directory)
        var info = stat()
        if stat(path, &info) != 0 {
            let code = errno
            throw .cannotOpen(
                path: path,
                detail: code == ENOENT
                    ? "there is no analytics store here (herald serve writes one in its data directory unless --no-analytics-store is given)"
                    : String(cString: strerror(code)))
        }
        var configuration = Configuration()
        configuration.label = "HeraldSQLite.report"
        configuration.readonly = true
        configuration.busyMode = .timeout(5)
        do {
            let database = try DatabaseQueue(path: path, configuration: configuration)
            return try database.read { db in
                try SQLiteAnalyticsStore.checkIsAnalyticsStore(db, path: path, allowEmpty: false)
                return try query(db, path: path, days: days, label: label, now: now)
            }
        } catch {
            throw SQLiteStore.storeError(error, path: path, during: .read)
        }
    }

    /// The report from an open analytics database.
    ///
    /// Long on purpose: the whole report built from one grouped query's rows, inside the caller's read transaction.
    static func query(_ db: Database, path: String, days: Int, label: String?, now: Int64) throws -> AnalyticsReport {
        let today = floorDivide(now, millisecondsPerDay)
        let firstDay = today - Int64(max(days, 1)) + 1
        var sql = """
            SELECT analytics_label, cohort_at / \(millisecondsPerDay) AS day, name, reason, result,
                   count(DISTINCT ifnull(message_id, event_key)), count(*), total(duration_ms), count(duration_ms),
                   message_type IS '\(AnalyticsEvent.unifiedPush)' AS push
            FROM event
            WHERE cohort_at >= ?
              AND name IN ('notification_receive', 'notification_foreground', 'notification_open', 'notification_dismiss',
                           'background_fetch', 'message_dropped', 'message_delivered')
            """
        var arguments: [any DatabaseValueConvertible] = [firstDay * millisecondsPerDay]
        if let label {
            sql += " AND analytics_label = ?"
            arguments.append(label)
        }
        sql += " GROUP BY analytics_label, day, name, reason, result, push"

        var cells: [LabelKey: [Int64: Figures]] = [:]
        var pushes: [Int64: PushFigures] = [:]
        let rows = try GRDB.Row.fetchCursor(db, sql: sql, arguments: StatementArguments(arguments))
        while let row = try rows.next() {
            let rowLabel: String? = row[0]
            let day: Int64 = row[1]
            let name: String = row[2]
            let reason: String? = row[3]
            let result: String? = row[4]
            let messages: Int = row[5]
            let events: Int = row[6]
            let milliseconds: Double = row[7]
            let timed: Int = row[8]
            let push: Bool = row[9]
            if push {
                switch name {
                case AnalyticsEvent.Name.notificationReceive.rawValue: pushes[day, default: PushFigures()].accepted += messages
                case AnalyticsEvent.Name.messageDelivered.rawValue: pushes[day, default: PushFigures()].delivered += messages
                case AnalyticsEvent.Name.messageDropped.rawValue:
                    pushes[day, default: PushFigures()].drops[reason ?? "unknown", default: 0] += events
                default: break
                }
                continue
            }
            var figures = cells[LabelKey(rowLabel), default: [:]][day, default: Figures()]
            switch name {
            case AnalyticsEvent.Name.notificationReceive.rawValue: figures.received += messages
            case AnalyticsEvent.Name.notificationForeground.rawValue, AnalyticsEvent.Name.notificationBackground.rawValue:
                figures.impressions += messages
            case AnalyticsEvent.Name.notificationOpen.rawValue: figures.opens += messages
            case AnalyticsEvent.Name.notificationDismiss.rawValue: figures.dismissals += messages
            case AnalyticsEvent.Name.messageDelivered.rawValue: continue
            case AnalyticsEvent.Name.backgroundFetch.rawValue:
                switch result {
                case BackgroundFetchResult.newData.rawValue: figures.fetchNewData += messages
                case BackgroundFetchResult.noData.rawValue: figures.fetchNoData += messages
                default: figures.fetchFailed += messages
                }
                figures.fetchMilliseconds += Int64(milliseconds)
                figures.timedFetches += timed
            default:
                figures.drops[reason ?? "unknown", default: 0] += events
            }
            cells[LabelKey(rowLabel), default: [:]][day] = figures
        }

        let lastDay = max(today, cells.values.flatMap(\.keys).max() ?? today, pushes.keys.max() ?? today)
        var sections = cells.map { key, days in
            let sorted = days.sorted { $0.key < $1.key }.map { Day(day: $0.key, figures: $0.value) }
            return LabelSection(label: key.label, days: sorted, total: sorted.reduce(Figures()) { $0 + $1.figures })
        }
        sections.sort { a, b in
            if (a.label == nil) != (b.label == nil) { return b.label == nil }
            if a.total.received != b.total.received { return a.total.received > b.total.received }
            return (a.label ?? "").utf8.lexicographicallyPrecedes((b.label ?? "").utf8)
        }
        var daily: [Day] = []
        for day in firstDay...lastDay {
            daily.append(Day(day: day, figures: cells.values.reduce(Figures()) { $0 + ($1[day] ?? Figures()) }))
        }
        return AnalyticsReport(
            path: path, firstDay: firstDay, lastDay: lastDay, labelFilter: label, labels: sections, daily: daily,
            total: daily.reduce(Figures()) { $0 + $1.figures },
            unifiedPush: pushes.sorted { $0.key < $1.key }.map { PushDay(day: $0.key, figures: $0.value) },
            unifiedPushTotal: pushes.values.reduce(PushFigures()) { $0 + $1 })
    }

    /// `YYYY-MM-DD` of `day` (days since 1970-01-01, proleptic Gregorian, UTC).
    public static func date(ofDay day: Int64) -> String {
        // Howard Hinnant's civil_from_days.
        let z = day + 719_468
        let era = floorDivide(z, 146_097)
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let dayOfMonth = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        func pad(_ value: Int64, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(dayOfMonth, 2))"
    }

    /// The UTC day (days since 1970) of `milliseconds` since 1970.
    public static func day(ofMilliseconds milliseconds: Int64) -> Int64 {
        floorDivide(milliseconds, millisecondsPerDay)
    }

    private static func floorDivide(_ a: Int64, _ b: Int64) -> Int64 {
        let quotient = a / b
        return (a % b != 0 && (a < 0) != (b < 0)) ? quotient - 1 : quotient
    }

    /// A label as a dictionary key, `nil` included.
    private struct LabelKey: Hashable {
        var label: String?
        init(_ label: String?) { self.label = label }
    }
}
