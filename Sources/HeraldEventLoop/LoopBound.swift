/// Carries a value that belongs to one loop through `@Sendable` closures. The value may only be read
/// or changed on that loop's thread, which every access checks.
public struct LoopBound<Value>: @unchecked Sendable {
    // @unchecked Sendable: the value is only reachable through `value`, which traps off the loop thread.
    public let loop: any EventLoopScheduler
    private let box: Box

    private final class Box {
        var value: Value
        init(_ value: Value) { self.value = value }
    }

    /// Binds `value` to `loop`. Call on the loop thread.
    public init(_ value: Value, loop: any EventLoopScheduler) {
        loop.preconditionInEventLoop()
        self.loop = loop
        self.box = Box(value)
    }

    /// The value; traps when not called on the loop thread.
    public var value: Value {
        get {
            loop.preconditionInEventLoop()
            return box.value
        }
        nonmutating set {
            loop.preconditionInEventLoop()
            box.value = newValue
        }
    }
}
