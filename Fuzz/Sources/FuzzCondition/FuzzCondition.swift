import FuzzSupport
import Herald

/// FCM condition expressions on arbitrary text: parsed, or refused with a MessageError. A parsed condition names
/// at most five topics, each a valid topic name, and evaluates against any set of them.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let text = String(decoding: FuzzInput.bytes(start, count), as: UTF8.self)
    guard let condition = try? TopicCondition.parse(text) else { return 0 }
    let topics = condition.topics
    guard topics.count <= TopicCondition.maximumTopics else { fatalError("\(topics.count) topics accepted in \(text)") }
    for topic in topics where (try? TopicName.validate(topic)) == nil { fatalError("invalid topic name '\(topic)' accepted in \(text)") }
    // Every subset of the named topics (at most 2^5).
    for mask in 0..<(1 << topics.count) {
        let subscribed = Set(topics.indices.filter { mask & (1 << $0) != 0 }.map { topics[$0] })
        _ = condition.evaluate(subscribedTo: subscribed)
    }
    return 0
}

@_cdecl("FuzzCondition_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    fuzzerMain(argc, argv, fuzz)
}
