"""A UnifiedPush app written against the D-Bus specification with dbus-next, for the distributor's tests.

    up_app.py SERVICE_NAME VERSION [--register TOKEN] [--distributor NAME] [--events FILE] [--vapid KEY] [--refuse-first N]
        [--hold]

Owns SERVICE_NAME on the session bus (DBUS_SESSION_BUS_ADDRESS), serves org.unifiedpush.Connector<VERSION> at
/org/unifiedpush/Connector, registers TOKEN with the distributor through org.unifiedpush.Distributor<VERSION> when
asked, and prints one JSON object per line for everything that happens: ready, registered, endpoint, message
(with the body in hex, the time it arrived, ns since 1970, and for Connector1 whether the call asked for an
answer), unregistered. Reads commands from standard input,
one a line: `unregister TOKEN`, `register TOKEN`, `register-as OTHER_NAME TOKEN` (a name it does not own).
With --events it appends the events to FILE instead, reads no commands and runs until the bus goes away: so it
runs when the bus starts it (D-Bus activation). With --refuse-first N (Connector2) it answers its first N Message
calls with a D-Bus error, as a busy app may, and prints a "refused" event for each. With --hold (Connector2) it
leaves each Message call unanswered, printing a "held" event (its id and body), until the command `release`: then it
answers every call it holds, in order, printing a "message" event for each, and holds no more until the command
`hold` (which it acknowledges with a "holding" event).
"""

import asyncio
import json
import os
import sys
import time

from dbus_next import DBusError, Message, MessageFlag, MessageType, Variant
from dbus_next.aio import MessageBus
from dbus_next.service import ServiceInterface, method


class PatientSocket:
    """The bus socket as dbus-next 0.2.3's writer sees it, with a full socket taken for what it is.

    Its writer takes a send that would block (EAGAIN) for a lost connection: it stops reading and writing but keeps
    the socket, so the app holds its name and never reads again. Here such a send sent nothing, and the writer waits
    for the socket to be writable, as it does after a partial send. An app under a burst of calls, on a loaded
    machine, otherwise stalls for reasons of its own library, not of the distributor.
    """

    def __init__(self, sock):
        self._sock = sock

    def send(self, data):
        try:
            return self._sock.send(data)
        except BlockingIOError:
            return 0

    def __getattr__(self, name):
        return getattr(self._sock, name)

DISTRIBUTOR_PATH = "/org/unifiedpush/Distributor"
CONNECTOR_PATH = "/org/unifiedpush/Connector"


EVENTS = sys.argv[sys.argv.index("--events") + 1] if "--events" in sys.argv else None
# Message calls still to refuse (--refuse-first).
REFUSE = {"left": int(sys.argv[sys.argv.index("--refuse-first") + 1]) if "--refuse-first" in sys.argv else 0}


# Message calls left unanswered (--hold) until the `release` command.
HOLD = {"on": "--hold" in sys.argv, "calls": []}


def say(event, **fields):
    fields["event"] = event
    if EVENTS:
        with open(EVENTS, "a") as events:
            events.write(json.dumps(fields) + "\n")
    else:
        print(json.dumps(fields), flush=True)


# Whether the call being handled asks for an answer ("expected") or not ("none"): set for each incoming message
# before the service sees it.
REPLY = {"wanted": "expected"}


def note_reply_flag(message):
    REPLY["wanted"] = "none" if message.flags & MessageFlag.NO_REPLY_EXPECTED else "expected"


def hold(message):
    """Takes a Connector2 Message call before the service does while --hold is on: kept, not answered."""
    if not HOLD["on"] or message.message_type != MessageType.METHOD_CALL or message.member != "Message":
        return None
    if message.interface != "org.unifiedpush.Connector2":
        return None
    args = message.body[0]
    say("held", token=args["token"].value, body=bytes(args["message"].value).hex(), id=args["id"].value)
    HOLD["calls"].append(message)
    return True


def release(bus):
    """Answers the Message calls held so far, in order (a call whose caller is gone is answered all the same: the
    bus drops that answer), and holds no more."""
    HOLD["on"] = False
    for message in HOLD["calls"]:
        args = message.body[0]
        say("message", token=args["token"].value, body=bytes(args["message"].value).hex(), id=args["id"].value, at=time.time_ns())
        bus.send(Message.new_method_return(message, "a{sv}", [{"id": Variant("s", args["id"].value)}]))
    HOLD["calls"] = []


class Connector1(ServiceInterface):
    def __init__(self):
        super().__init__("org.unifiedpush.Connector1")

    @method()
    def Message(self, token: "s", message: "ay", id: "s"):
        say("message", token=token, body=bytes(message).hex(), id=id, at=time.time_ns(), reply=REPLY["wanted"])

    @method()
    def NewEndpoint(self, token: "s", endpoint: "s"):
        say("endpoint", token=token, endpoint=endpoint)

    @method()
    def Unregistered(self, token: "s"):
        say("unregistered", token=token)


class Connector2(ServiceInterface):
    def __init__(self):
        super().__init__("org.unifiedpush.Connector2")

    @method()
    def Message(self, args: "a{sv}") -> "a{sv}":
        if REFUSE["left"] > 0:
            REFUSE["left"] -= 1
            say("refused", id=args["id"].value)
            raise DBusError("org.example.Busy", "not now")
        say("message", token=args["token"].value, body=bytes(args["message"].value).hex(), id=args["id"].value, at=time.time_ns())
        return {"id": Variant("s", args["id"].value)}

    @method()
    def NewEndpoint(self, args: "a{sv}") -> "a{sv}":
        say("endpoint", token=args["token"].value, endpoint=args["endpoint"].value)
        return {}

    @method()
    def Unregistered(self, args: "a{sv}") -> "a{sv}":
        say("unregistered", token=args["token"].value)
        return {}


async def call(bus, distributor, version, member, signature, body):
    reply = await bus.call(
        Message(
            destination=distributor,
            path=DISTRIBUTOR_PATH,
            interface=f"org.unifiedpush.Distributor{version}",
            member=member,
            signature=signature,
            body=body,
        )
    )
    if reply.message_type == MessageType.ERROR:
        say("error", member=member, name=reply.error_name, detail=str(reply.body))
        return None
    return reply.body


VAPID = sys.argv[sys.argv.index("--vapid") + 1] if "--vapid" in sys.argv else None


async def register(bus, distributor, version, service, token):
    if version == 1:
        body = await call(bus, distributor, 1, "Register", "sss", [service, token, "a test app"])
        if body is not None:
            say("registered", token=token, result=body[0], reason=body[1])
    else:
        arguments = {
            "service": Variant("s", service),
            "token": Variant("s", token),
            "description": Variant("s", "a test app"),
        }
        if VAPID:
            arguments["vapid"] = Variant("s", VAPID)
        body = await call(bus, distributor, 2, "Register", "a{sv}", [arguments])
        if body is not None:
            result = body[0]
            say("registered", token=token, result=result["success"].value, reason=result.get("reason", Variant("s", "")).value)


async def unregister(bus, distributor, version, service, token):
    if version == 1:
        await call(bus, distributor, 1, "Unregister", "s", [token])
    else:
        await call(bus, distributor, 2, "Unregister", "a{sv}", [{"token": Variant("s", token), "service": Variant("s", service)}])
    say("unregister-sent", token=token)


async def main():
    service = sys.argv[1]
    version = int(sys.argv[2])
    options = sys.argv[3:]
    distributor = "org.unifiedpush.Distributor.herald"
    if "--distributor" in options:
        distributor = options[options.index("--distributor") + 1]
    bus = await MessageBus(bus_address=os.environ["DBUS_SESSION_BUS_ADDRESS"]).connect()
    bus._writer.sock = PatientSocket(bus._writer.sock)
    bus.add_message_handler(note_reply_flag)
    bus.add_message_handler(hold)
    bus.export(CONNECTOR_PATH, Connector1() if version == 1 else Connector2())
    await bus.request_name(service)
    say("ready", service=service)
    if "--register" in options:
        await register(bus, distributor, version, service, options[options.index("--register") + 1])
    if EVENTS:
        await bus.wait_for_disconnect()
        return
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        words = line.split()
        if words[:1] == ["unregister"]:
            await unregister(bus, distributor, version, service, words[1])
        elif words[:1] == ["register"]:
            await register(bus, distributor, version, service, words[1])
        elif words[:1] == ["register-as"]:
            await register(bus, distributor, version, words[1], words[2])
        elif words[:1] == ["release"]:
            release(bus)
        elif words[:1] == ["hold"]:
            HOLD["on"] = True
            say("holding")
    bus.disconnect()


asyncio.run(main())
