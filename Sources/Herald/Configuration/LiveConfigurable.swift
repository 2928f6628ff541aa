/// A plugin that takes new values of its live settings (those its ``ConfigurationSection`` declares with
/// `live: true`) while it runs.
///
/// A daemon that reloads its configuration (`herald serve` on SIGHUP) calls ``applyLiveSettings(_:)`` on each
/// registered plugin that conforms, once the new configuration has resolved without error and a live setting changed.
/// The values it passes are those in force: the new ones of every live setting, the start's of every other (those
/// need a restart, and the daemon says so in its log).
///
/// ```swift
/// extension Forecast: LiveConfigurable {
///     func applyLiveSettings(_ configuration: ConfigurationValues) {
///         interval.store(configuration.integer(Forecast.Settings.interval), ordering: .relaxed)
///     }
/// }
/// ```
public protocol LiveConfigurable: Sendable {
    /// Takes the new values of the plugin's live settings from `configuration` (every setting's value in force; the
    /// plugin reads its own). Values have been checked against their settings already.
    ///
    /// Called from a thread of the daemon's blocking pool, never on the loop and never twice at once; a value that
    /// governs work already under way may wait for the next piece of work (a run's timeout applies to runs started
    /// after it).
    func applyLiveSettings(_ configuration: ConfigurationValues)
}
