public import Herald

extension AnalyticsReport {
    /// The report as one self-contained HTML page: inline CSS and inline SVG charts (a delivery funnel with the
    /// background fetch results and the drops, and a per-day chart), the summary figures and the per-label table. It
    /// loads nothing: no scripts, no fonts, no images, no links, so it opens offline and can be mailed as it is.
    ///
    /// `generatedAt` (milliseconds since 1970) is printed in the heading.
    public func html(generatedAt: Int64 = WallClock.nowMilliseconds()) -> String {
        var page = HTMLPage()
        page.raw("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n")
        page.raw("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n")
        page.raw(
            "<title>Herald delivery report, \(Self.rangeText(firstDay, lastDay))</title>\n<style>\n\(Self.css)</style>\n</head>\n<body>\n<main>\n"
        )

        page.raw("<header>\n<h1>Herald delivery report</h1>\n<p class=\"meta\">")
        page.text(Self.rangeText(firstDay, lastDay))
        page.raw(" &middot; UTC days, by when each message arrived")
        if let labelFilter {
            page.raw(" &middot; label <strong>")
            page.text(labelFilter)
            page.raw("</strong>")
        }
        page.raw("<br>")
        page.text("\(path) · generated \(Self.timestampText(generatedAt))")
        page.raw("</p>\n</header>\n")

        summaryCards(&page)

        page.raw("<div class=\"row\">\n<section class=\"card funnel\">\n<h2>Delivery funnel</h2>\n")
        funnelChart(&page)
        page.raw("<h2>Background fetch <span class=\"h2-note\">silent messages, by result</span></h2>\n")
        fetchChart(&page)
        page.raw("</section>\n<section class=\"card side\">\n<h2>Drops by reason</h2>\n")
        dropsChart(&page)
        page.raw("<h2>Open rate per day <span class=\"h2-note\">opens / impressions</span></h2>\n")
        openRateChart(&page)
        page.raw("</section>\n</div>\n")

        page.raw("<section class=\"card\">\n<h2>Per day</h2>\n")
        dailyChart(&page)
        page.raw("</section>\n")

        page.raw("<section class=\"card\">\n<h2>By label and day</h2>\n")
        labelTable(&page)
        page.raw("</section>\n")

        page.raw(
            """
            <footer>
            <p><strong>received</strong>: messages accepted for delivery (<code>notification_receive</code>);
            <strong>impressions</strong>: notifications presented (<code>notification_foreground</code>);
            <strong>opens</strong>: notifications opened with the default or a custom action (<code>notification_open</code>).
            Each message counts once, on the UTC day it arrived.
            <strong>open rate</strong> = opens &divide; impressions: only a presented notification can be opened.
            <strong>background fetch</strong>: silent messages by their combined result.
            <strong>drops</strong>: <code>message_dropped</code> events by reason.</p>
            </footer>
            </main>
            </body>
            </html>

            """)
        return page.html
    }

    // MARK: - Sections

    private func summaryCards(_ page: inout HTMLPage) {
        var cards: [(String, String, String, String)] = [
            ("received", Self.grouped(total.received), "messages", Self.Palette.received),
            ("impressions", Self.grouped(total.impressions), "presented", Self.Palette.impressions),
            ("opens", Self.grouped(total.opens), "\(Self.grouped(total.dismissals)) dismissed", Self.Palette.opens),
            ("open rate", Self.percent(total.openRate), "opens / impressions", Self.Palette.opens),
            (
                "background fetch", Self.grouped(total.fetches),
                total.averageFetchMilliseconds.map { "mean \(Self.milliseconds($0))" } ?? "no fetches", Self.Palette.newData
            ),
            ("dropped", Self.grouped(total.dropped), "messages or requests", Self.Palette.dropped),
        ]
        if !unifiedPush.isEmpty {
            cards.append(
                (
                    "UnifiedPush accepted", Self.grouped(unifiedPushTotal.accepted),
                    "\(Self.grouped(unifiedPushTotal.delivered)) delivered, \(Self.grouped(unifiedPushTotal.dropped)) dropped",
                    Self.Palette.received
                ))
        }
        page.raw("<section class=\"summary\">\n")
        for (title, value, note, colour) in cards {
            page.raw("<div class=\"stat\" style=\"border-top-color: \(colour)\"><div class=\"stat-title\">")
            page.text(title)
            page.raw("</div><div class=\"stat-value\" data-figure=\"\(Self.attribute(title))\">")
            page.text(value)
            page.raw("</div><div class=\"stat-note\">")
            page.text(note)
            page.raw("</div></div>\n")
        }
        page.raw("</section>\n")
    }

    /// Received → impressions → opens, as bars on one scale, each with its share of the step before.
    private func funnelChart(_ page: inout HTMLPage) {
        let steps: [(String, Int, String?, String)] = [
            ("Received", total.received, nil, Self.Palette.received),
            (
                "Impressions", total.impressions,
                total.received > 0 ? "\(Self.percent(Double(total.impressions) / Double(total.received))) of received" : nil,
                Self.Palette.impressions
            ),
            ("Opens", total.opens, total.impressions > 0 ? "\(Self.percent(total.openRate)) of impressions" : nil, Self.Palette.opens),
        ]
        let width = 640.0
        let labelWidth = 122.0
        let barArea = width - labelWidth - 150
        let rowHeight = 64.0
        let scale = Double(max(steps.map(\.1).max() ?? 0, 1))
        var svg = SVG(width: width, height: rowHeight * Double(steps.count) + 8, label: "Delivery funnel: received, impressions, opens")
        for (index, step) in steps.enumerated() {
            let y = 8 + Double(index) * rowHeight
            let barWidth = max(step.1 > 0 ? 3 : 0, barArea * Double(step.1) / scale)
            svg.text(step.0, x: 0, y: y + 27, className: "axis-strong")
            svg.rect(x: labelWidth, y: y, width: barArea, height: 40, fill: "#eef1f5", radius: 6)
            if barWidth > 0 { svg.rect(x: labelWidth, y: y, width: barWidth, height: 40, fill: step.3, radius: 6) }
            svg.text(Self.grouped(step.1), x: labelWidth + barArea + 12, y: y + 22, className: "figure")
            if let share = step.2 {
                svg.text(share, x: labelWidth + barArea + 12, y: y + 40, className: "note")
            }
        }
        page.raw(svg.markup)
    }

    /// New data / no data / failed as one stacked bar on the funnel's layout, with a legend carrying the counts.
    private func fetchChart(_ page: inout HTMLPage) {
        let parts: [(String, Int, String)] = [
            ("new data", total.fetchNewData, Self.Palette.newData),
            ("no data", total.fetchNoData, Self.Palette.noData),
            ("failed", total.fetchFailed, Self.Palette.failed),
        ]
        let width = 640.0
        let labelWidth = 122.0
        let barArea = width - labelWidth - 150
        var svg = SVG(width: width, height: 92, label: "Background fetch results: new data, no data, failed")
        let sum = parts.reduce(0) { $0 + $1.1 }
        svg.text("Fetches", x: 0, y: 23, className: "axis-strong")
        svg.rect(x: labelWidth, y: 0, width: barArea, height: 34, fill: "#eef1f5", radius: 6)
        if sum > 0 {
            var x = labelWidth
            for part in parts where part.1 > 0 {
                let w = barArea * Double(part.1) / Double(sum)
                svg.rect(x: x, y: 0, width: w, height: 34, fill: part.2, radius: 0, title: "\(part.0): \(part.1)")
                x += w
            }
        }
        svg.text(Self.grouped(sum), x: labelWidth + barArea + 12, y: 18, className: "figure")
        if let mean = total.averageFetchMilliseconds {
            svg.text("mean \(Self.milliseconds(mean))", x: labelWidth + barArea + 12, y: 36, className: "note")
        }
        for (index, part) in parts.enumerated() {
            let x = labelWidth + Double(index) * 130
            svg.rect(x: x, y: 52, width: 12, height: 12, fill: part.2, radius: 3)
            let share = sum > 0 ? " (\(Self.percent(Double(part.1) / Double(sum))))" : ""
            svg.text(part.0, x: x + 18, y: 63, className: "note")
            svg.text("\(Self.grouped(part.1))\(share)", x: x + 18, y: 84, className: "figure-small")
        }
        page.raw(svg.markup)
        if sum == 0 { page.raw("<p class=\"empty\">No silent messages in this range.</p>\n") }
    }

    /// One bar per drop reason that occurred.
    private func dropsChart(_ page: inout HTMLPage) {
        let drops = total.dropsByReason
        guard !drops.isEmpty else {
            page.raw("<p class=\"empty\">No drops in this range.</p>\n")
            return
        }
        let width = 420.0
        let labelWidth = 162.0
        let rowHeight = 26.0
        let scale = Double(max(drops.map(\.count).max() ?? 1, 1))
        var svg = SVG(width: width, height: rowHeight * Double(drops.count), label: "Drops by reason")
        for (index, drop) in drops.enumerated() {
            let y = Double(index) * rowHeight
            svg.text(drop.reason.replacingUnderscores, x: 0, y: y + 16, className: "note")
            svg.rect(
                x: labelWidth, y: y + 4, width: max(3, (width - labelWidth - 50) * Double(drop.count) / scale), height: 16,
                fill: Self.Palette.dropped, radius: 4)
            svg.text(Self.grouped(drop.count), x: width - 40, y: y + 17, className: "figure-small")
        }
        page.raw(svg.markup)
    }

    /// The open rate of each day as a line (broken over days without impressions), on a percentage axis.
    private func openRateChart(_ page: inout HTMLPage) {
        let rates = daily.map { $0.figures.openRate }
        guard rates.contains(where: { $0 != nil }) else {
            page.raw("<p class=\"empty\">No impressions in this range.</p>\n")
            return
        }
        let width = 420.0
        let height = 150.0
        let left = 40.0
        let right = 8.0
        let top = 8.0
        let bottom = 24.0
        let plotWidth = width - left - right
        let plotHeight = height - top - bottom
        let highest = rates.compactMap { $0 }.max() ?? 0
        let ceiling = min(1, max(0.1, (highest * 10).rounded(.up) / 10 + (highest * 10 == (highest * 10).rounded(.up) ? 0.1 : 0)))
        var svg = SVG(width: width, height: height, label: "Open rate per day")
        for step in 0...4 {
            let value = ceiling * Double(step) / 4
            let y = top + plotHeight - plotHeight * Double(step) / 4
            svg.line(x1: left, y1: y, x2: width - right, y2: y, stroke: step == 0 ? "#9aa5b1" : "#e3e8ee")
            svg.text("\(Int((value * 100).rounded()))%", x: left - 6, y: y + 4, className: "axis", anchor: "end")
        }
        let slot = plotWidth / Double(max(daily.count, 1))
        func point(_ index: Int, _ rate: Double) -> (Double, Double) {
            (left + slot * (Double(index) + 0.5), top + plotHeight - plotHeight * min(rate, ceiling) / ceiling)
        }
        var run: [(Double, Double)] = []
        func finishRun() {
            if run.count > 1 { svg.polyline(run, stroke: Self.Palette.opens) }
            run = []
        }
        for (index, rate) in rates.enumerated() {
            guard let rate else {
                finishRun()
                continue
            }
            run.append(point(index, rate))
        }
        finishRun()
        let labelEvery = max(1, Int((Double(daily.count) * 48 / plotWidth).rounded(.up)))
        for (index, day) in daily.enumerated() {
            if let rate = rates[index] {
                let (x, y) = point(index, rate)
                svg.dot(cx: x, cy: y, r: 3, fill: Self.Palette.opens, title: "\(day.date): \(Self.percent(rate))")
            }
            if index % labelEvery == 0 {
                svg.text(
                    String(day.date.dropFirst(5)), x: left + slot * (Double(index) + 0.5), y: height - 6, className: "axis",
                    anchor: "middle")
            }
        }
        page.raw(svg.markup)
    }

    /// Received, impressions, opens and drops per day as grouped bars.
    private func dailyChart(_ page: inout HTMLPage) {
        let width = 1040.0
        let height = 300.0
        let left = 52.0
        let right = 12.0
        let top = 16.0
        let bottom = 44.0
        let plotWidth = width - left - right
        let plotHeight = height - top - bottom
        let maximum = daily.map { max($0.figures.received, $0.figures.impressions, $0.figures.opens, $0.figures.dropped) }.max() ?? 0
        let (ceiling, step) = Self.niceScale(maximum)
        var svg = SVG(width: width, height: height, label: "Received, impressions, opens and drops per day")
        // Grid and y axis.
        var tick = 0
        while tick <= ceiling {
            let y = top + plotHeight - plotHeight * Double(tick) / Double(ceiling)
            svg.line(x1: left, y1: y, x2: width - right, y2: y, stroke: tick == 0 ? "#9aa5b1" : "#e3e8ee")
            svg.text(Self.grouped(tick), x: left - 8, y: y + 4, className: "axis", anchor: "end")
            tick += step
        }
        let slot = plotWidth / Double(max(daily.count, 1))
        let series: [(KeyPath<Figures, Int>, String, String)] = [
            (\.received, Self.Palette.received, "received"), (\.impressions, Self.Palette.impressions, "impressions"),
            (\.opens, Self.Palette.opens, "opens"), (\.dropped, Self.Palette.dropped, "dropped"),
        ]
        let barWidth = min(18, slot * 0.8 / Double(series.count))
        let labelEvery = max(1, Int((Double(daily.count) * 64 / plotWidth).rounded(.up)))
        for (index, day) in daily.enumerated() {
            let centre = left + slot * (Double(index) + 0.5)
            let groupStart = centre - barWidth * Double(series.count) / 2
            for (s, entry) in series.enumerated() {
                let value = day.figures[keyPath: entry.0]
                guard value > 0 else { continue }
                let h = plotHeight * Double(value) / Double(ceiling)
                svg.rect(
                    x: groupStart + barWidth * Double(s), y: top + plotHeight - h, width: barWidth - 1, height: max(h, 1), fill: entry.1,
                    radius: 2,
                    title: "\(day.date): \(value) \(entry.2)")
            }
            if index % labelEvery == 0 {
                svg.text(String(day.date.dropFirst(5)), x: centre, y: height - bottom + 18, className: "axis", anchor: "middle")
            }
        }
        // Legend.
        let legend: [(String, String)] = [
            ("received", Self.Palette.received), ("impressions", Self.Palette.impressions), ("opens", Self.Palette.opens),
            ("dropped", Self.Palette.dropped),
        ]
        for (index, entry) in legend.enumerated() {
            let x = left + Double(index) * 120
            svg.rect(x: x, y: height - 16, width: 12, height: 12, fill: entry.1, radius: 3)
            svg.text(entry.0, x: x + 18, y: height - 6, className: "note")
        }
        page.raw(svg.markup)
    }

    /// The table of the terminal report, as HTML (the same columns, grouped): a block per label, a row per day, a total row.
    private func labelTable(_ page: inout HTMLPage) {
        guard !labels.isEmpty else {
            page.raw("<p class=\"empty\">")
            page.text(labelFilter.map { "No events for label \($0) in this range." } ?? "No events in this range.")
            page.raw("</p>\n")
            return
        }
        page.raw(
            """
            <div class="table-wrap"><table>
            <colgroup><col><col span="4"><col span="3" class="shade"><col span="2"></colgroup>
            <thead><tr class="groups"><th></th><th colspan="4" class="group">delivery</th><th colspan="3" class="group">background fetch</th><th colspan="2" class="group">drops</th></tr>
            <tr><th class="left">day</th><th>received</th><th>impressions</th><th>opens</th><th>open rate</th><th>new data</th><th>no data</th><th>failed</th><th>dropped</th><th class="left">by reason</th></tr></thead>

            """)
        var blocks = labels.map { ($0.displayName, $0.label == nil, $0.days, $0.total) }
        if labels.count > 1 { blocks.append(("all labels", true, daily.filter { !$0.figures.isEmpty }, total)) }
        for block in blocks {
            page.raw("<tbody>\n<tr class=\"label-row\"><th colspan=\"\(Self.columns.count)\" class=\"left\">")
            if block.1 { page.raw("<em>") }
            page.text(block.0)
            if block.1 { page.raw("</em>") }
            page.raw("</th></tr>\n")
            for day in block.2 { tableRow(&page, Self.cells(day.date, day.figures), total: false) }
            tableRow(&page, Self.cells("total", block.3), total: true)
            page.raw("</tbody>\n")
        }
        page.raw("</table></div>\n")
    }

    private func tableRow(_ page: inout HTMLPage, _ cells: [String], total: Bool) {
        page.raw(total ? "<tr class=\"total\">" : "<tr>")
        for (index, cell) in cells.enumerated() {
            page.raw(index == 0 || index == cells.count - 1 ? "<td class=\"left\">" : "<td>")
            if index == cells.count - 1 {
                // Each reason and its count kept on one line; the list wraps between reasons.
                for (position, reason) in cell.split(separator: ", ").enumerated() {
                    if position > 0 { page.raw(", ") }
                    page.raw("<span class=\"reason\">")
                    page.text(String(reason))
                    page.raw("</span>")
                }
            } else {
                page.text(cell)
            }
            page.raw("</td>")
        }
        page.raw("</tr>\n")
    }

    // MARK: - Formatting

    enum Palette {
        static let received = "#3b5bdb"
        static let impressions = "#1098ad"
        static let opens = "#37b24d"
        static let newData = "#2b8a3e"
        static let noData = "#adb5bd"
        static let failed = "#e03131"
        static let dropped = "#f08c00"
    }

    static let css = """
        :root { color-scheme: light; }
        * { box-sizing: border-box; }
        body { margin: 0; background: #f4f6f9; color: #1f2933; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", "DejaVu Sans", sans-serif; }
        main { max-width: 1120px; margin: 0 auto; padding: 24px 24px 40px; }
        header h1 { margin: 0 0 4px; font-size: 26px; font-weight: 650; letter-spacing: -0.01em; }
        .meta { margin: 0 0 20px; color: #52606d; font-size: 14px; }
        h2 { margin: 0 0 14px; font-size: 16px; font-weight: 650; color: #323f4b; }
        section.card h2 ~ h2 { margin-top: 26px; }
        .h2-note { font-weight: 400; color: #7b8794; font-size: 13px; margin-left: 6px; }
        .summary { display: grid; grid-template-columns: repeat(6, 1fr); gap: 12px; margin-bottom: 16px; }
        .stat { background: #fff; border-radius: 10px; border-top: 4px solid #ccc; padding: 12px 14px; box-shadow: 0 1px 2px rgba(16, 24, 40, 0.08); }
        .stat-title { font-size: 12px; text-transform: uppercase; letter-spacing: 0.04em; color: #616e7c; }
        .stat-value { font-size: 28px; font-weight: 650; font-variant-numeric: tabular-nums; margin: 2px 0; }
        .stat-note { font-size: 12px; color: #7b8794; }
        .row { display: grid; grid-template-columns: 3fr 2fr; gap: 16px; }
        .card { background: #fff; border-radius: 10px; padding: 18px 20px; margin-bottom: 16px; box-shadow: 0 1px 2px rgba(16, 24, 40, 0.08); }
        svg { display: block; width: 100%; height: auto; }
        svg text { font-family: inherit; }
        .axis { font-size: 12px; fill: #616e7c; }
        .axis-strong { font-size: 15px; font-weight: 600; fill: #323f4b; }
        .figure { font-size: 18px; font-weight: 650; fill: #1f2933; }
        .figure-small { font-size: 15px; font-weight: 650; fill: #1f2933; }
        .note { font-size: 13px; fill: #52606d; }
        .empty { color: #7b8794; font-size: 14px; margin: 4px 0 0; }
        .table-wrap { overflow-x: auto; }
        table { border-collapse: collapse; width: 100%; font-size: 13.5px; font-variant-numeric: tabular-nums; }
        th, td { padding: 5px 9px; text-align: right; white-space: nowrap; border-bottom: 1px solid #e4e7eb; }
        thead th { font-size: 11.5px; text-transform: uppercase; letter-spacing: 0.03em; color: #616e7c; border-bottom: 2px solid #cbd2d9; }
        thead tr.groups th { border-bottom: 0; padding-bottom: 0; color: #323f4b; }
        thead th.group { text-align: center; border-bottom: 2px solid #9aa5b1; }
        col.shade { background: #fafbfc; }
        .left { text-align: left; }
        td.left:last-child { white-space: normal; min-width: 180px; color: #52606d; font-size: 12.5px; }
        tr.total td:last-child { font-weight: 600; }
        .reason { white-space: nowrap; }
        tr.label-row th { background: #f0f4f8; color: #243b53; font-size: 14px; padding-top: 8px; }
        tr.total td { font-weight: 650; border-bottom: 2px solid #cbd2d9; }
        footer { color: #616e7c; font-size: 13px; }
        code { font-size: 12.5px; background: #eef1f5; padding: 0 4px; border-radius: 4px; }
        @media (max-width: 900px) { .summary { grid-template-columns: repeat(3, 1fr); } .row { grid-template-columns: 1fr; } }

        """

    /// A round ceiling and tick step for an axis from 0 to `maximum`.
    static func niceScale(_ maximum: Int) -> (ceiling: Int, step: Int) {
        guard maximum > 0 else { return (4, 1) }
        let rough = Double(maximum) / 4
        var magnitude = 1.0
        while magnitude * 10 <= rough { magnitude *= 10 }
        let step = [1.0, 2.0, 5.0, 10.0].map { $0 * magnitude }.first { $0 >= rough } ?? magnitude * 10
        let stepInt = max(1, Int(step))
        let ceiling = ((maximum + stepInt - 1) / stepInt) * stepInt
        return (max(ceiling, stepInt), stepInt)
    }

    /// `12,345`.
    static func grouped(_ value: Int) -> String {
        let digits = String(value.magnitude)
        var result = ""
        for (index, digit) in digits.enumerated() {
            if index > 0 && (digits.count - index) % 3 == 0 { result.append(",") }
            result.append(digit)
        }
        return value < 0 ? "-" + result : result
    }

    static func milliseconds(_ value: Double) -> String {
        value >= 1000 ? "\(Double(Int((value / 100).rounded())) / 10) s" : "\(Int(value.rounded())) ms"
    }

    static func rangeText(_ first: Int64, _ last: Int64) -> String {
        first == last ? date(ofDay: first) : "\(date(ofDay: first)) to \(date(ofDay: last))"
    }

    /// `YYYY-MM-DD HH:MM UTC`.
    static func timestampText(_ milliseconds: Int64) -> String {
        let day = day(ofMilliseconds: milliseconds)
        let minutes = (milliseconds - day * millisecondsPerDay) / 60_000
        let hh = minutes / 60
        let mm = minutes % 60
        return "\(date(ofDay: day)) \(hh < 10 ? "0" : "")\(hh):\(mm < 10 ? "0" : "")\(mm) UTC"
    }

    static func attribute(_ text: String) -> String {
        String(text.map { $0 == " " ? "-" : $0 })
    }
}

/// HTML text being written, with escaping for text content.
struct HTMLPage {
    private(set) var html = ""

    mutating func raw(_ markup: String) { html += markup }
    mutating func text(_ text: String) { html += escapeMarkup(text) }
}

/// `text` escaped for HTML and SVG text and attribute values; control characters other than tab and newline dropped.
func escapeMarkup(_ text: String) -> String {
    var result = ""
    result.reserveCapacity(text.utf8.count)
    for scalar in text.unicodeScalars {
        switch scalar {
        case "&": result += "&amp;"
        case "<": result += "&lt;"
        case ">": result += "&gt;"
        case "\"": result += "&quot;"
        case "'": result += "&#39;"
        default:
            if scalar.value < 0x20 && scalar != "\t" && scalar != "\n" || (0x7F...0x9F).contains(scalar.value) { continue }
            result.unicodeScalars.append(scalar)
        }
    }
    return result
}

/// An inline SVG chart being drawn, in its own coordinate space (`viewBox`), scaled to the width of its container.
struct SVG {
    private var body = ""
    let width: Double
    let height: Double
    let label: String

    init(width: Double, height: Double, label: String) {
        self.width = width
        self.height = height
        self.label = label
    }

    mutating func rect(x: Double, y: Double, width: Double, height: Double, fill: String, radius: Double, title: String? = nil) {
        body += "<rect x=\"\(n(x))\" y=\"\(n(y))\" width=\"\(n(width))\" height=\"\(n(height))\" rx=\"\(n(radius))\" fill=\"\(fill)\""
        if let title {
            body += "><title>\(escapeMarkup(title))</title></rect>"
        } else {
            body += "/>"
        }
    }

    mutating func dot(cx: Double, cy: Double, r: Double, fill: String, title: String) {
        body += "<circle cx=\"\(n(cx))\" cy=\"\(n(cy))\" r=\"\(n(r))\" fill=\"\(fill)\"><title>\(escapeMarkup(title))</title></circle>"
    }

    mutating func polyline(_ points: [(Double, Double)], stroke: String) {
        let list = points.map { "\(n($0.0)),\(n($0.1))" }.joined(separator: " ")
        body += "<polyline points=\"\(list)\" fill=\"none\" stroke=\"\(stroke)\" stroke-width=\"2.5\" stroke-linejoin=\"round\"/>"
    }

    mutating func line(x1: Double, y1: Double, x2: Double, y2: Double, stroke: String) {
        body += "<line x1=\"\(n(x1))\" y1=\"\(n(y1))\" x2=\"\(n(x2))\" y2=\"\(n(y2))\" stroke=\"\(stroke)\" stroke-width=\"1\"/>"
    }

    mutating func text(_ text: String, x: Double, y: Double, className: String, anchor: String = "start") {
        body += "<text x=\"\(n(x))\" y=\"\(n(y))\" class=\"\(className)\""
        if anchor != "start" { body += " text-anchor=\"\(anchor)\"" }
        body += ">\(escapeMarkup(text))</text>"
    }

    var markup: String {
        "<svg viewBox=\"0 0 \(n(width)) \(n(height))\" role=\"img\" aria-label=\"\(escapeMarkup(label))\">\(body)</svg>\n"
    }

    /// A coordinate with at most one decimal.
    private func n(_ value: Double) -> String {
        let tenths = Int((value * 10).rounded())
        return tenths % 10 == 0 ? "\(tenths / 10)" : "\(Double(tenths) / 10)"
    }
}

extension String {
    /// `not_targeted` as `not targeted`, for chart labels.
    fileprivate var replacingUnderscores: String { String(map { $0 == "_" ? " " : $0 }) }
}
