/// FCM's topic name rule: `[a-zA-Z0-9-_.~%]{1,900}`, optionally written with a `/topics/` prefix.
public enum TopicName {
    /// The longest topic name FCM accepts.
    public static let maximumLength = 900

    /// Returns the topic name without its `/topics/` prefix, or throws ``MessageError/Reason/invalidTopicName(_:)``.
    public static func validate(_ raw: String) throws(MessageError) -> String {
        let name = raw.hasPrefix("/topics/") ? String(raw.dropFirst("/topics/".count)) : raw
        guard (1...maximumLength).contains(name.utf8.count), name.utf8.allSatisfy(isAllowed) else {
            throw MessageError(.invalidTopicName(raw))
        }
        return name
    }

    private static func isAllowed(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            true
        case UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "~"), UInt8(ascii: "%"):
            true
        default:
            false
        }
    }
}

/// A parsed FCM topic condition: `'a' in topics && ('b' in topics || !('c' in topics))`.
///
/// The grammar is FCM's: topic tests `'name' in topics` (single or double quotes), `!`, `&&`, `||` and
/// parentheses, with `&&` binding tighter than `||`; at most five topics.
public indirect enum TopicCondition: Sendable, Hashable {
    case topic(String)
    case not(TopicCondition)
    case and(TopicCondition, TopicCondition)
    case or(TopicCondition, TopicCondition)

    /// The most topics a condition may name.
    public static let maximumTopics = 5

    /// Parses `text`, throwing ``MessageError/Reason/invalidCondition(_:detail:)`` with what is wrong and where.
    public static func parse(_ text: String) throws(MessageError) -> TopicCondition {
        var parser = Parser(bytes: Array(text.utf8), text: text)
        return try parser.parseWhole()
    }

    /// Whether the condition holds for an instance subscribed to `topics`.
    public func evaluate(subscribedTo topics: Set<String>) -> Bool {
        switch self {
        case .topic(let name): topics.contains(name)
        case .not(let inner): !inner.evaluate(subscribedTo: topics)
        case .and(let lhs, let rhs): lhs.evaluate(subscribedTo: topics) && rhs.evaluate(subscribedTo: topics)
        case .or(let lhs, let rhs): lhs.evaluate(subscribedTo: topics) || rhs.evaluate(subscribedTo: topics)
        }
    }

    /// The topics the condition names.
    public var topics: [String] {
        switch self {
        case .topic(let name): [name]
        case .not(let inner): inner.topics
        case .and(let lhs, let rhs), .or(let lhs, let rhs): lhs.topics + rhs.topics
        }
    }

    private struct Parser {
        let bytes: [UInt8]
        let text: String
        var index = 0
        var topicCount = 0
        var depth = 0

        func fail(_ detail: String) -> MessageError {
            MessageError(.invalidCondition(text, detail: "\(detail) at character \(index + 1)"))
        }

        mutating func parseWhole() throws(MessageError) -> TopicCondition {
            let condition = try parseOr()
            skipSpace()
            guard index == bytes.count else { throw fail("unexpected '\(Character(UnicodeScalar(bytes[index])))'") }
            return condition
        }

        mutating func skipSpace() {
            while index < bytes.count, bytes[index] == UInt8(ascii: " ") || bytes[index] == UInt8(ascii: "\t") { index += 1 }
        }

        mutating func consume(_ token: String) -> Bool {
            skipSpace()
            let tokenBytes = Array(token.utf8)
            guard bytes.count - index >= tokenBytes.count, Array(bytes[index..<index + tokenBytes.count]) == tokenBytes else {
                return false
            }
            index += tokenBytes.count
            return true
        }

        mutating func parseOr() throws(MessageError) -> TopicCondition {
            var lhs = try parseAnd()
            while consume("||") { lhs = .or(lhs, try parseAnd()) }
            return lhs
        }

        mutating func parseAnd() throws(MessageError) -> TopicCondition {
            var lhs = try parseUnary()
            while consume("&&") { lhs = .and(lhs, try parseUnary()) }
            return lhs
        }

        mutating func parseUnary() throws(MessageError) -> TopicCondition {
            depth += 1
            defer { depth -= 1 }
            guard depth <= 32 else { throw fail("nested too deeply") }
            if consume("!") { return .not(try parseUnary()) }
            if consume("(") {
                let inner = try parseOr()
                guard consume(")") else { throw fail("expected ')'") }
                return inner
            }
            return try parseTopicTest()
        }

        mutating func parseTopicTest() throws(MessageError) -> TopicCondition {
            skipSpace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "'") || bytes[index] == UInt8(ascii: "\"") else {
                throw fail(index < bytes.count ? "expected a quoted topic name" : "unexpected end")
            }
            let quote = bytes[index]
            index += 1
            let start = index
            while index < bytes.count, bytes[index] != quote { index += 1 }
            guard index < bytes.count else { throw fail("unterminated topic name") }
            let name = String(decoding: bytes[start..<index], as: UTF8.self)
            index += 1
            do {
                _ = try TopicName.validate(name)
            } catch {
                throw fail("invalid topic name '\(name)'")
            }
            guard consume("in") else { throw fail("expected 'in topics' after '\(name)'") }
            guard consume("topics") else { throw fail("expected 'topics' after 'in'") }
            topicCount += 1
            guard topicCount <= TopicCondition.maximumTopics else { throw fail("more than \(TopicCondition.maximumTopics) topics") }
            return .topic(name)
        }
    }
}
