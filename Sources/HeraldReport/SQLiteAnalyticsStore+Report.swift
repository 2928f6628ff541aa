public import Herald
public import HeraldSQLite

extension SQLiteAnalyticsStore {
    /// The report of the last `days` days up to `now` (UTC days), for `label` only when given; see
    /// ``AnalyticsReport/read(directory:days:label:now:)``.
    public func report(days: Int = 7, label: String? = nil, now: Int64 = WallClock.nowMilliseconds()) throws(StoreError) -> AnalyticsReport
    {
        do {
            return try database.read { db in try AnalyticsReport.query(db, path: path, days: days, label: label, now: now) }
        } catch {
            throw SQLiteStore.storeError(error, path: path, during: .read)
        }
    }
}
