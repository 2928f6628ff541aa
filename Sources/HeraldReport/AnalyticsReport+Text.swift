extension AnalyticsReport {
    /// The column headers of the table, in order (the first is the day).
    static let columns = [
        "day", "received", "impressions", "opens", "open rate", "fetch new", "fetch no data", "fetch failed", "dropped", "drops by reason",
    ]

    /// The report as a terminal table: a heading, then one block per label with a row per day that had any figure and
    /// a total row, then (with several labels) the total of all labels. Plain text, no colours; ends with a newline.
    public func table() -> String {
        var lines = heading()
        lines.append("")
        guard !labels.isEmpty else {
            if unifiedPush.isEmpty {
                lines.append(labelFilter.map { "No events for label \(Self.printable($0)) in this range." } ?? "No events in this range.")
            } else {
                lines += unifiedPushBlock()
            }
            return lines.joined(separator: "\n") + "\n"
        }
        var blocks: [(title: String, rows: [[String]])] = labels.map { section in
            (
                Self.printable(section.displayName),
                section.days.map { Self.cells($0.date, $0.figures) } + [Self.cells("total", section.total)]
            )
        }
        if labels.count > 1 {
            blocks.append(
                ("all labels", daily.filter { !$0.figures.isEmpty }.map { Self.cells($0.date, $0.figures) } + [Self.cells("total", total)]))
        }
        // One set of column widths for every block, so the blocks line up.
        var widths = Self.columns.map(\.count)
        for block in blocks {
            for row in block.rows {
                for (index, cell) in row.enumerated() { widths[index] = max(widths[index], cell.count) }
            }
        }
        for (index, block) in blocks.enumerated() {
            if index > 0 { lines.append("") }
            lines.append("label: \(block.title)")
            lines.append(Self.line(Self.columns, widths))
            for row in block.rows { lines.append(Self.line(row, widths)) }
        }
        if !unifiedPush.isEmpty {
            lines.append("")
            lines += unifiedPushBlock()
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// The column headers of the UnifiedPush table.
    static let pushColumns = ["day", "accepted", "delivered", "dropped", "drops by reason"]

    /// The UnifiedPush pushes (counted apart from the messages above): a row per day that had any, and a total row.
    func unifiedPushBlock() -> [String] {
        func cells(_ first: String, _ figures: PushFigures) -> [String] {
            [
                first, "\(figures.accepted)", "\(figures.delivered)", "\(figures.dropped)",
                figures.dropsByReason.isEmpty
                    ? "-" : figures.dropsByReason.map { "\(Self.printable($0.reason)) \($0.count)" }.joined(separator: ", "),
            ]
        }
        let rows = unifiedPush.map { cells($0.date, $0.figures) } + [cells("total", unifiedPushTotal)]
        var widths = Self.pushColumns.map(\.count)
        for row in rows {
            for (index, cell) in row.enumerated() { widths[index] = max(widths[index], cell.count) }
        }
        return ["UnifiedPush pushes (to desktop apps, by when each push arrived)", Self.line(Self.pushColumns, widths)]
            + rows.map { Self.line($0, widths) }
    }

    /// The lines above the table: the file, the range and the definitions.
    func heading() -> [String] {
        let range = firstDay == lastDay ? Self.date(ofDay: firstDay) : "\(Self.date(ofDay: firstDay)) to \(Self.date(ofDay: lastDay))"
        return [
            "Herald analytics: \(Self.printable(path))",
            "\(range) (UTC days, by when each message arrived)\(labelFilter.map { ", label \(Self.printable($0))" } ?? "")",
            "open rate = opens / impressions (only presented notifications can be opened)",
        ]
    }

    /// A row's cells: the first column, then the figures.
    static func cells(_ first: String, _ figures: Figures) -> [String] {
        [
            first, "\(figures.received)", "\(figures.impressions)", "\(figures.opens)", percent(figures.openRate),
            "\(figures.fetchNewData)",
            "\(figures.fetchNoData)", "\(figures.fetchFailed)", "\(figures.dropped)",
            figures.dropsByReason.isEmpty
                ? "-" : figures.dropsByReason.map { "\(printable($0.reason)) \($0.count)" }.joined(separator: ", "),
        ]
    }

    /// `text` safe to print on a terminal: control characters (which a sender could put in an analytics label to move
    /// the cursor or recolour the screen) are written as `\u{1B}` escapes.
    static func printable(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: isControl) else { return text }
        var result = ""
        for scalar in text.unicodeScalars {
            if isControl(scalar) {
                result += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }

    /// `rate` as a percentage with one decimal (`50.0%`), `-` for none.
    static func percent(_ rate: Double?) -> String {
        guard let rate, rate.isFinite else { return "-" }
        let tenths = Int((rate * 1000).rounded())
        return "\(tenths / 10).\(tenths % 10)%"
    }

    /// The first column left-aligned, the figures right-aligned, the reasons (last) left-aligned without padding.
    private static func line(_ cells: [String], _ widths: [Int]) -> String {
        var parts: [String] = []
        for (index, cell) in cells.enumerated() {
            let padding = String(repeating: " ", count: max(0, widths[index] - cell.count))
            if index == 0 {
                parts.append(cell + padding)
            } else if index == cells.count - 1 {
                parts.append(cell)
            } else {
                parts.append(padding + cell)
            }
        }
        return "  " + parts.joined(separator: "  ")
    }
}
