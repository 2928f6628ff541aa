// CBaseline: the practical ceiling of scripts/peers: libuv, http_parser and simdjson (On-Demand) doing the work
// Herald does for an FCM v1 token message, with nothing else.
//
//     cbaseline [--socket PATH] [--http PORT] [--project ID] [--token TOKEN] [--durable FILE]
//     cbaseline --decode N --body FILE [--token TOKEN]
//
// Server mode: one libuv loop on the main thread serves a Unix socket of JSON lines (`--socket`, one answer line per
// line) and HTTP/1.1 with keep-alive and pipelining on 127.0.0.1 (`--http`, `POST /v1/projects/{p}/messages:send`),
// both on the same loop. Each body is parsed with simdjson's On-Demand API and validated as Herald's
// FCMSendRequest.decode validates a token message: the root and `message` are objects with only known fields (proto
// names and their lowerCamelCase forms), exactly one of token / fid / topic / condition, a non-empty token,
// `notification` an object of strings (title, body, image), `data` an object of strings without reserved keys
// (from, message_type, notification, google.*, gcm.*), `validate_only` a boolean, the payload Herald would build
// (aps.alert + data keys) at most 4096 bytes, and the token equal to `--token`. A valid message gets a message ID
// (a 16-digit counter from a random start, as Herald's) and goes to a no-op handler (a counter); the answer is Herald's, byte for byte
// on success: `{"name":"projects/<p>/messages/<id>"}` (HTTP: `200 OK`, `Content-Type: application/json;
// charset=UTF-8`, `Content-Length`), or Google's error shape with Herald's status, code and message. `android`,
// `webpush`, `apns` and `fcm_options` are only checked for being objects (the benchmark body has none of them).
//
// Answers are gathered per read and written once per read (as the NIO servers flush once per read burst).
//
// With `--durable FILE` (the durable ceiling: what "acknowledged means on disk" costs at the least): each accepted
// message (its ID and body, one line) is appended to an in-memory journal, and the answers wait; once per loop turn,
// after the turn's reads (a check handle), the journal is written to FILE (created or truncated at start) with one
// write and one fdatasync, and only then are the waiting answers written. A failed write or fdatasync ends the
// process (nothing is acknowledged that is not on disk). FILE is filled with zeros ahead of the writes, 64 MiB at a
// time (fsynced once per extension), so that an fdatasync flushes data only: on ext4 a write that grows a file, or
// that lands in space fallocate reserved, changes metadata, and each fdatasync would then wait for a journal commit
// as well (SQLite's write-ahead log avoids it the same way, by reusing its file).
//
// Prints
// `token=<token>` and `ready`; SIGUSR1 prints `handled=<n>`; SIGINT / SIGTERM print it and exit.
//
// Decode mode (scenario 2's ceiling): decodes and validates FILE (its first line) N times in this process with one
// reused parser and prints `RESULT ops=<N> ns_per_op=<wall> cpu_ns_per_op=<thread CPU> stage1=<kernel> stage2=<kernel>`.
//
// Built by scripts/peers with the system's compiler:
//     g++ -O2 -march=native -std=c++17 cbaseline.cpp -lsimdjson -luv -lhttp_parser
// (-march=native so that simdjson's On-Demand stage, compiled into this file, uses the machine's SIMD kernel.)

#include <http_parser.h>
#include <simdjson.h>
#include <uv.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <string_view>
#include <vector>

using namespace simdjson;

namespace {

std::string g_project = "herald";
std::string g_token = "bench-token";
std::string g_sender = "1234567890";
uint64_t g_next_id = 0;
uint64_t g_handled = 0;
int g_durable_fd = -1;    // --durable: the journal file
off_t g_journal_end = 0;  // --durable: where the next write goes
off_t g_journal_zeroed = 0;  // --durable: the file's length, zeros after g_journal_end
std::string g_journal;    // --durable: the accepted messages of this loop turn, not yet written

// The no-op handler Herald's benchmark servers have: counts the message.
__attribute__((noinline)) void handle_message(std::string_view /*token*/, const char* /*id*/) {
    g_handled++;
}

struct Error {
    int code = 0;               // HTTP status
    const char* status = "";   // google.rpc status
    const char* fcm = "";      // FCM errorCode
    std::string message;
};

Error invalid(std::string message) { return Error{400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", std::move(message)}; }

void append_escaped(std::string& out, std::string_view s) {
    static const char* hex = "0123456789abcdef";
    for (unsigned char c : s) {
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
            if (c < 0x20) {
                out += "\\u00";
                out += hex[c >> 4];
                out += hex[c & 15];
            } else {
                out += static_cast<char>(c);
            }
        }
    }
}

// Bytes of a string as Herald's JSON writer writes it, quotes included.
size_t escaped_size(std::string_view s) {
    size_t n = 2;
    for (unsigned char c : s) {
        if (c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f') n += 2;
        else if (c < 0x20) n += 6;
        else n += 1;
    }
    return n;
}

void append_error(std::string& out, const Error& e) {
    out += "{\"error\":{\"code\":";
    out += std::to_string(e.code);
    out += ",\"message\":\"";
    append_escaped(out, e.message);
    out += "\",\"status\":\"";
    out += e.status;
    out += "\",\"details\":[{\"@type\":\"type.googleapis.com/google.firebase.fcm.v1.FcmError\",\"errorCode\":\"";
    out += e.fcm;
    out += "\"}]}}";
}

bool is_field(std::string_view key, std::string_view name, std::string_view camel) { return key == name || key == camel; }

bool reserved_data_key(std::string_view key) {
    return key == "from" || key == "message_type" || key == "notification" || key.substr(0, 7) == "google." ||
           key.substr(0, 4) == "gcm.";
}

std::string unknown(std::string_view path, std::string_view key) {
    std::string full = path.empty() ? std::string(key) : std::string(path) + "." + std::string(key);
    return "Invalid JSON payload received. Unknown name \"" + std::string(key) + "\" at '" + full + "': Cannot find field.";
}

std::string wrong_type(std::string_view field, std::string_view expected) {
    return "Invalid value at '" + std::string(field) + "': expected " + std::string(expected) + ".";
}

std::string malformed(error_code code) {
    return std::string("Invalid JSON payload received. ") + error_message(code);
}

// What a valid message leaves for the handler and the answer.
struct Decoded {
    std::string_view token;
    bool validate_only = false;
    size_t payload = 2;   // `{}` of the userInfo Herald builds
    int data_count = 0;
};

#define TRY_JSON(expr)                                              \
    do {                                                            \
        error_code _e = (expr);                                     \
        if (_e) return invalid(malformed(_e));                      \
    } while (0)

// `message`: only known fields, exactly one target, notification and data as Herald checks them.
Error decode_message(ondemand::value message_value, Decoded& out) {
    ondemand::object message;
    if (message_value.get_object().get(message)) return invalid(wrong_type("message", "an object"));
    int targets = 0;
    std::string_view target_names[4];   // the target fields named, in order (views into the parser's buffer)
    bool has_token = false;
    std::string_view title, body;
    bool has_title = false, has_body = false;
    size_t data_bytes = 0;
    for (auto field : message) {
        std::string_view key;
        TRY_JSON(field.unescaped_key().get(key));
        ondemand::value value;
        TRY_JSON(field.value().get(value));
        ondemand::json_type type;
        TRY_JSON(value.type().get(type));
        if (type == ondemand::json_type::null) continue;   // null is absent, as in Herald
        if (key == "token" || key == "fid" || key == "topic" || key == "condition") {
            std::string_view s;
            if (type != ondemand::json_type::string || value.get_string().get(s))
                return invalid(wrong_type("message." + std::string(key), "a string"));
            if (targets < 4) target_names[targets] = key;
            targets++;
            if (key == "token") {
                if (s.empty()) return invalid("The registration token '' is not valid: it must be a non-empty string.");
                out.token = s;   // points into the parser's string buffer, valid until the next parse
                has_token = true;
            }
        } else if (key == "notification") {
            ondemand::object notification;
            if (value.get_object().get(notification)) return invalid(wrong_type("message.notification", "an object"));
            for (auto nf : notification) {
                std::string_view nkey;
                TRY_JSON(nf.unescaped_key().get(nkey));
                ondemand::value nvalue;
                TRY_JSON(nf.value().get(nvalue));
                ondemand::json_type ntype;
                TRY_JSON(nvalue.type().get(ntype));
                if (!(nkey == "title" || nkey == "body" || nkey == "image")) return invalid(unknown("message.notification", nkey));
                if (ntype == ondemand::json_type::null) continue;
                std::string_view s;
                if (ntype != ondemand::json_type::string || nvalue.get_string().get(s))
                    return invalid(wrong_type("message.notification." + std::string(nkey), "a string"));
                if (nkey == "title") { title = s; has_title = true; }
                else if (nkey == "body") { body = s; has_body = true; }
                else data_bytes += escaped_size("fcm_options") + 1 + 2 + escaped_size("image") + 1 + escaped_size(s) + 1;
            }
        } else if (key == "data") {
            ondemand::object data;
            if (value.get_object().get(data)) return invalid(wrong_type("message.data", "an object of strings"));
            for (auto df : data) {
                std::string_view dkey;
                TRY_JSON(df.unescaped_key().get(dkey));
                std::string_view s;
                if (df.value().get_string().get(s))
                    return invalid(wrong_type("message.data." + std::string(dkey), "a string (FCM map values are strings)"));
                if (reserved_data_key(dkey))
                    return invalid("Invalid data key '" + std::string(dkey) +
                                   "': 'from', 'message_type', 'notification' and keys starting with 'google.' or 'gcm.' are reserved.");
                data_bytes += escaped_size(dkey) + 1 + escaped_size(s) + 1;   // "k":"v",
                out.data_count++;
            }
        } else if (key == "android" || key == "webpush" || key == "apns" || is_field(key, "fcm_options", "fcmOptions")) {
            if (type != ondemand::json_type::object) return invalid(wrong_type("message." + std::string(key), "an object"));
        } else if (key == "name") {
            if (type != ondemand::json_type::string) return invalid(wrong_type("message.name", "a string"));
        } else {
            return invalid(unknown("message", key));
        }
    }
    if (targets == 0)
        return invalid("The message must name exactly one target: 'token', 'fid', 'topic' or 'condition'; it names none.");
    if (targets > 1) {
        std::string names;
        for (int i = 0; i < targets && i < 4; i++) names += (i ? ", '" : "'") + std::string(target_names[i]) + "'";
        return invalid("The message must name exactly one target: 'token', 'fid', 'topic' or 'condition'; it names " +
                       names + ".");
    }
    if (!has_token) return Error{501, "UNIMPLEMENTED", "INTERNAL", "This baseline handles token messages only."};
    // The payload Herald sizes: {"aps":{"alert":{"title":..,"body":..}}, data keys}, compact.
    size_t size = 2 + data_bytes;
    if (has_title || has_body) {
        size += escaped_size("aps") + 1 + 2 + escaped_size("alert") + 1 + 2 + 1;
        if (has_title) size += escaped_size("title") + 1 + escaped_size(title) + 1;
        if (has_body) size += escaped_size("body") + 1 + escaped_size(body) + 1;
        size -= 1;
    }
    if (out.data_count > 0 || has_title || has_body) size -= 1;   // no comma after the last member
    out.payload = size;
    if (size > 4096)
        return invalid("The message payload is " + std::to_string(size) + " bytes; at most 4096 are allowed.");
    return Error{};
}

// Decodes and validates one send body (with SIMDJSON_PADDING readable bytes after it).
Error decode(ondemand::parser& parser, const char* bytes, size_t length, size_t capacity, Decoded& out) {
    if (length == 0) return invalid("The request body is empty.");
    ondemand::document doc;
    TRY_JSON(parser.iterate(padded_string_view(bytes, length, capacity)).get(doc));
    ondemand::object root;
    error_code e = doc.get_object().get(root);
    if (e == INCORRECT_TYPE) return invalid(wrong_type("", "an object"));
    if (e) return invalid(malformed(e));
    bool has_message = false;
    for (auto field : root) {
        std::string_view key;
        TRY_JSON(field.unescaped_key().get(key));
        ondemand::value value;
        TRY_JSON(field.value().get(value));
        if (key == "message") {
            ondemand::json_type type;
            TRY_JSON(value.type().get(type));
            if (type == ondemand::json_type::null) continue;
            Error error = decode_message(value, out);
            if (error.code) return error;
            has_message = true;
        } else if (is_field(key, "validate_only", "validateOnly")) {
            ondemand::json_type type;
            TRY_JSON(value.type().get(type));
            if (type == ondemand::json_type::null) continue;
            if (value.get_bool().get(out.validate_only)) return invalid(wrong_type("validate_only", "true or false"));
        } else {
            return invalid(unknown("", key));
        }
    }
    if (!doc.current_location().error()) return invalid(malformed(TRAILING_CONTENT));   // anything after the root object
    if (!has_message) return invalid("Missing required field 'message'.");
    return Error{};
}

// The whole job for one body: decode, target check, message ID, handler; the answer appended to `out`.
// Returns the HTTP status.
int process(ondemand::parser& parser, const char* bytes, size_t length, size_t capacity, std::string& out) {
    Decoded decoded;
    Error error = decode(parser, bytes, length, capacity, decoded);
    if (!error.code && decoded.token != g_token) {
        error = Error{404, "NOT_FOUND", "UNREGISTERED",
                      "Requested entity was not found: no registration here for token " + std::string(decoded.token) + "."};
    }
    if (error.code) {
        append_error(out, error);
        return error.code;
    }
    char id[24];
    snprintf(id, sizeof id, "%llu", static_cast<unsigned long long>(++g_next_id));
    if (!decoded.validate_only) {
        if (g_durable_fd >= 0) {
            g_journal += id;
            g_journal += ' ';
            g_journal.append(bytes, length);
            g_journal += '\n';
        }
        handle_message(decoded.token, id);
    }
    out += "{\"name\":\"projects/";
    append_escaped(out, g_project);
    out += "/messages/";
    out += id;
    out += "\"}";
    return 200;
}

// MARK: connections

struct Connection {
    uv_stream_t* stream = nullptr;
    bool http = false;
    bool closing = false;
    bool close_after_write = false;
    bool waiting = false;      // --durable: answers held until this turn's journal is on disk
    std::vector<char> input;   // unconsumed bytes, with SIMDJSON_PADDING readable after them
    size_t used = 0;
    std::string output;        // answers gathered during one read
    // HTTP
    http_parser parser;
    std::string url;
    std::vector<char> body;
    size_t body_used = 0;
};

ondemand::parser g_parser;
http_parser_settings g_http_settings;

struct WriteRequest {
    uv_write_t request;
    std::string bytes;
    Connection* connection;
};

std::vector<Connection*> g_waiting;   // --durable: connections whose answers wait for the fdatasync

void on_close(uv_handle_t* handle) {
    auto* connection = static_cast<Connection*>(handle->data);
    if (connection->waiting) {
        for (auto& waiting : g_waiting)
            if (waiting == connection) waiting = nullptr;
    }
    delete connection;
    free(handle);
}

void close_connection(Connection* connection) {
    if (connection->closing) return;
    connection->closing = true;
    uv_close(reinterpret_cast<uv_handle_t*>(connection->stream), on_close);
}

void on_write(uv_write_t* request, int status) {
    auto* write = reinterpret_cast<WriteRequest*>(request);
    Connection* connection = write->connection;
    delete write;
    if (status < 0 || connection->close_after_write) close_connection(connection);
}

// Writes what the read produced: directly when the socket takes it all, else through a write request.
void flush(Connection* connection) {
    if (connection->output.empty()) {
        if (connection->close_after_write) close_connection(connection);
        return;
    }
    uv_buf_t buffer = uv_buf_init(connection->output.data(), static_cast<unsigned>(connection->output.size()));
    int written = uv_try_write(connection->stream, &buffer, 1);
    if (written == static_cast<int>(connection->output.size())) {
        connection->output.clear();
        if (connection->close_after_write) close_connection(connection);
        return;
    }
    if (written < 0 && written != UV_EAGAIN) {
        close_connection(connection);
        return;
    }
    size_t offset = written > 0 ? static_cast<size_t>(written) : 0;
    auto* write = new WriteRequest;
    write->connection = connection;
    write->bytes.assign(connection->output, offset, std::string::npos);
    connection->output.clear();
    uv_buf_t rest = uv_buf_init(write->bytes.data(), static_cast<unsigned>(write->bytes.size()));
    if (uv_write(&write->request, connection->stream, &rest, 1, on_write) < 0) {
        delete write;
        close_connection(connection);
    }
}

void on_alloc(uv_handle_t* handle, size_t /*suggested*/, uv_buf_t* buffer) {
    auto* connection = static_cast<Connection*>(handle->data);
    const size_t chunk = 64 * 1024;
    if (connection->input.size() < connection->used + chunk + SIMDJSON_PADDING)
        connection->input.resize(connection->used + chunk + SIMDJSON_PADDING);
    buffer->base = connection->input.data() + connection->used;
    buffer->len = chunk;
}

void lines_read(Connection* connection, size_t count) {
    char* base = connection->input.data();
    size_t start = 0;
    size_t end = connection->used + count;
    for (size_t i = connection->used; i < end; i++) {
        if (base[i] != '\n') continue;
        size_t length = i - start;
        if (length > 0 && base[start + length - 1] == '\r') length--;
        if (length > 0) {
            process(g_parser, base + start, length, connection->input.size() - start, connection->output);
            connection->output += '\n';
        }
        start = i + 1;
    }
    if (end - start > 1024 * 1024) {   // a line longer than 1 MiB: refuse it, as Herald bounds a line
        append_error(connection->output, invalid("The line is longer than 1048576 bytes."));
        connection->output += '\n';
        connection->close_after_write = true;
        connection->used = 0;
        return;
    }
    memmove(base, base + start, end - start);
    connection->used = end - start;
}

void http_read(Connection* connection, const char* data, size_t count) {
    size_t parsed = http_parser_execute(&connection->parser, &g_http_settings, data, count);
    if (connection->parser.http_errno != HPE_OK || parsed != count) {
        if (connection->parser.http_errno != HPE_PAUSED) {
            const char* bad = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
            connection->output += bad;
            connection->close_after_write = true;
        }
    }
}

void on_read(uv_stream_t* stream, ssize_t count, const uv_buf_t* /*buffer*/) {
    auto* connection = static_cast<Connection*>(stream->data);
    if (count < 0) {
        close_connection(connection);
        return;
    }
    if (count == 0 || connection->close_after_write) return;
    if (connection->http) {
        http_read(connection, connection->input.data(), static_cast<size_t>(count));
    } else {
        lines_read(connection, static_cast<size_t>(count));
    }
    if (g_durable_fd < 0) {
        flush(connection);
    } else if (!connection->waiting) {
        connection->waiting = true;
        g_waiting.push_back(connection);
    }
}

// --durable: 64 MiB more zeros at the end of the journal file, on disk with its new length.
void extend_journal() {
    static const std::vector<char> zeros(1 << 20);
    const off_t target = g_journal_zeroed + (off_t(64) << 20);
    while (g_journal_zeroed < target) {
        ssize_t n = pwrite(g_durable_fd, zeros.data(), zeros.size(), g_journal_zeroed);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            perror("cbaseline: extending the journal");
            exit(1);
        }
        g_journal_zeroed += n;
    }
    if (fsync(g_durable_fd) != 0) {
        perror("cbaseline: fsync of the journal");
        exit(1);
    }
}

// --durable, once per loop turn after its reads: the turn's journal to disk (one write, one fdatasync), then the
// answers that waited for it.
void on_check(uv_check_t* /*handle*/) {
    if (g_waiting.empty()) return;
    if (!g_journal.empty()) {
        if (g_journal_end + static_cast<off_t>(g_journal.size()) > g_journal_zeroed) extend_journal();
        size_t done = 0;
        while (done < g_journal.size()) {
            ssize_t n = pwrite(g_durable_fd, g_journal.data() + done, g_journal.size() - done, g_journal_end);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) {
                perror("cbaseline: write to the journal");
                exit(1);
            }
            done += static_cast<size_t>(n);
            g_journal_end += n;
        }
        if (fdatasync(g_durable_fd) != 0) {
            perror("cbaseline: fdatasync of the journal");
            exit(1);
        }
        g_journal.clear();
    }
    std::vector<Connection*> waiting;
    waiting.swap(g_waiting);
    for (Connection* connection : waiting) {
        if (!connection) continue;
        connection->waiting = false;
        flush(connection);
    }
}

int http_on_message_begin(http_parser* parser) {
    auto* connection = static_cast<Connection*>(parser->data);
    connection->url.clear();
    connection->body_used = 0;
    return 0;
}

int http_on_url(http_parser* parser, const char* at, size_t length) {
    static_cast<Connection*>(parser->data)->url.append(at, length);
    return 0;
}

int http_on_body(http_parser* parser, const char* at, size_t length) {
    auto* connection = static_cast<Connection*>(parser->data);
    if (connection->body.size() < connection->body_used + length + SIMDJSON_PADDING)
        connection->body.resize(connection->body_used + length + SIMDJSON_PADDING);
    memcpy(connection->body.data() + connection->body_used, at, length);
    connection->body_used += length;
    return 0;
}

const char* reason(int status) {
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 501: return "Not Implemented";
    default: return "Error";
    }
}

int http_on_message_complete(http_parser* parser) {
    auto* connection = static_cast<Connection*>(parser->data);
    static thread_local std::string body;
    body.clear();
    int status;
    std::string_view url(connection->url);
    const std::string_view prefix = "/v1/projects/", suffix = "/messages:send";
    if (url.size() > prefix.size() + suffix.size() && url.substr(0, prefix.size()) == prefix &&
        url.substr(url.size() - suffix.size()) == suffix) {
        std::string_view project = url.substr(prefix.size(), url.size() - prefix.size() - suffix.size());
        if (parser->method != HTTP_POST) {
            status = 405;
            append_error(body, Error{405, "INVALID_ARGUMENT", "INVALID_ARGUMENT", "Use POST."});
        } else if (project != g_project) {
            status = 403;
            append_error(body, Error{403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH",
                                     "The sender ID or project '" + std::string(project) + "' does not match this instance's '" +
                                         g_project + "'."});
        } else {
            if (connection->body.size() < SIMDJSON_PADDING) connection->body.resize(SIMDJSON_PADDING);
            status = process(g_parser, connection->body.data(), connection->body_used, connection->body.size(), body);
        }
    } else {
        status = 404;
        append_error(body, Error{404, "NOT_FOUND", "NOT_FOUND", "Not found."});
    }
    std::string& out = connection->output;
    out += "HTTP/1.1 ";
    out += std::to_string(status);
    out += ' ';
    out += reason(status);
    out += "\r\nContent-Type: application/json; charset=UTF-8\r\nContent-Length: ";
    out += std::to_string(body.size());
    out += "\r\n";
    if (!http_should_keep_alive(parser)) {
        out += "Connection: close\r\n";
        connection->close_after_write = true;
    }
    out += "\r\n";
    out += body;
    if (connection->close_after_write) http_parser_pause(parser, 1);
    return 0;
}

void on_connection(uv_stream_t* server, int status) {
    if (status < 0) return;
    bool http = server->type == UV_TCP;
    uv_stream_t* client;
    if (http) {
        auto* tcp = static_cast<uv_tcp_t*>(malloc(sizeof(uv_tcp_t)));
        uv_tcp_init(server->loop, tcp);
        uv_tcp_nodelay(tcp, 1);
        client = reinterpret_cast<uv_stream_t*>(tcp);
    } else {
        auto* pipe = static_cast<uv_pipe_t*>(malloc(sizeof(uv_pipe_t)));
        uv_pipe_init(server->loop, pipe, 0);
        client = reinterpret_cast<uv_stream_t*>(pipe);
    }
    auto* connection = new Connection;
    connection->stream = client;
    connection->http = http;
    client->data = connection;
    if (http) {
        http_parser_init(&connection->parser, HTTP_REQUEST);
        connection->parser.data = connection;
    }
    if (uv_accept(server, client) != 0 || uv_read_start(client, on_alloc, on_read) != 0) close_connection(connection);
}

void on_signal(uv_signal_t* handle, int signum) {
    fprintf(stdout, "handled=%llu\n", static_cast<unsigned long long>(g_handled));
    fflush(stdout);
    if (signum != SIGUSR1) uv_stop(handle->loop);
}

const char* option(int argc, char** argv, const char* name) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return argv[i + 1];
    return nullptr;
}

double thread_cpu_ns() {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

double wall_ns() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int decode_mode(long count, const char* path) {
    FILE* file = fopen(path, "rb");
    if (!file) {
        fprintf(stderr, "cbaseline: cannot open %s\n", path);
        return 2;
    }
    std::string text;
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, file)) > 0) text.append(chunk, n);
    fclose(file);
    size_t newline = text.find('\n');
    if (newline != std::string::npos) text.resize(newline);
    std::vector<char> padded(text.size() + SIMDJSON_PADDING);
    memcpy(padded.data(), text.data(), text.size());
    std::string out;
    out.reserve(512);
    // Warm up, and check that the body is accepted.
    for (int i = 0; i < 1000; i++) {
        out.clear();
        if (process(g_parser, padded.data(), text.size(), padded.size(), out) != 200) {
            fprintf(stderr, "cbaseline: the body is refused: %s\n", out.c_str());
            return 1;
        }
    }
    double wall = wall_ns(), cpu = thread_cpu_ns();
    for (long i = 0; i < count; i++) {
        out.clear();
        process(g_parser, padded.data(), text.size(), padded.size(), out);
    }
    double wall_end = wall_ns(), cpu_end = thread_cpu_ns();
    double divisor = count > 0 ? static_cast<double>(count) : 1.0;
    // Stage 1 (structural indexing) runs the kernel chosen at run time, stage 2 (On-Demand) the one compiled in.
    printf("RESULT ops=%ld ns_per_op=%.1f cpu_ns_per_op=%.1f stage1=%s stage2=%s\n", count, (wall_end - wall) / divisor,
           (cpu_end - cpu) / divisor, simdjson::get_active_implementation()->name().c_str(),
           SIMDJSON_STRINGIFY(SIMDJSON_BUILTIN_IMPLEMENTATION));
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (const char* project = option(argc, argv, "--project")) g_project = project;
    if (const char* token = option(argc, argv, "--token")) g_token = token;
    std::random_device random;
    std::uniform_int_distribution<uint64_t> start(1000000000000000ull, 9000000000000000ull);   // 16 digits, as Herald
    g_next_id = start(random);

    if (const char* count = option(argc, argv, "--decode")) {
        const char* body = option(argc, argv, "--body");
        if (!body) {
            fprintf(stderr, "usage: cbaseline --decode N --body FILE [--token TOKEN]\n");
            return 2;
        }
        return decode_mode(atol(count), body);
    }

    const char* socket_path = option(argc, argv, "--socket");
    const char* http_port = option(argc, argv, "--http");
    if (!socket_path && !http_port) {
        fprintf(stderr, "usage: cbaseline [--socket PATH] [--http PORT] [--project ID] [--token TOKEN] [--durable FILE]\n");
        return 2;
    }
    if (const char* journal = option(argc, argv, "--durable")) {
        g_durable_fd = open(journal, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (g_durable_fd < 0) {
            perror(journal);
            return 1;
        }
        extend_journal();
    }
    signal(SIGPIPE, SIG_IGN);
    memset(&g_http_settings, 0, sizeof g_http_settings);
    g_http_settings.on_message_begin = http_on_message_begin;
    g_http_settings.on_url = http_on_url;
    g_http_settings.on_body = http_on_body;
    g_http_settings.on_message_complete = http_on_message_complete;

    uv_loop_t* loop = uv_default_loop();
    uv_pipe_t pipe_server;
    uv_tcp_t tcp_server;
    if (socket_path) {
        unlink(socket_path);
        uv_pipe_init(loop, &pipe_server, 0);
        int r = uv_pipe_bind(&pipe_server, socket_path);
        if (!r) r = uv_listen(reinterpret_cast<uv_stream_t*>(&pipe_server), 256, on_connection);
        if (r) {
            fprintf(stderr, "cbaseline: %s: %s\n", socket_path, uv_strerror(r));
            return 1;
        }
    }
    if (http_port) {
        sockaddr_in address;
        uv_ip4_addr("127.0.0.1", atoi(http_port), &address);
        uv_tcp_init(loop, &tcp_server);
        int r = uv_tcp_bind(&tcp_server, reinterpret_cast<const sockaddr*>(&address), 0);
        if (!r) r = uv_listen(reinterpret_cast<uv_stream_t*>(&tcp_server), 256, on_connection);
        if (r) {
            fprintf(stderr, "cbaseline: port %s: %s\n", http_port, uv_strerror(r));
            return 1;
        }
    }
    uv_signal_t signals[3];
    int numbers[3] = {SIGUSR1, SIGINT, SIGTERM};
    for (int i = 0; i < 3; i++) {
        uv_signal_init(loop, &signals[i]);
        uv_signal_start(&signals[i], on_signal, numbers[i]);
    }
    uv_check_t check;
    if (g_durable_fd >= 0) {
        uv_check_init(loop, &check);
        uv_check_start(&check, on_check);
    }
    printf("token=%s\nready\n", g_token.c_str());
    fflush(stdout);
    uv_run(loop, UV_RUN_DEFAULT);
    if (socket_path) unlink(socket_path);
    return 0;
}
