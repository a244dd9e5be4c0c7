// The client protocol's JSON frames (docs/client-protocol.md): the close codes, the gateway's frames
// as this client reads them, and the frames it writes. docs/client-protocol-vectors.json holds the
// cases the Rust, TypeScript and C# sides all check against.

using System;

namespace Ferry.Client
{
    /// <summary>Why a session ended, as its gateway said (docs/client-protocol.md, "Close codes").</summary>
    public enum CloseCode
    {
        /// <summary>The client said bye, or its connection ended.</summary>
        Normal = 0,
        /// <summary>The gateway node is shutting down, or may have lost its owner lease: connect to another.</summary>
        Shutdown = 1,
        /// <summary>No valid hello, or the token was refused.</summary>
        Unauthenticated = 2,
        /// <summary>A frame did not decode.</summary>
        Malformed = 3,
        /// <summary>A frame over max_frame.</summary>
        TooLarge = 4,
        /// <summary>A frame type the gateway does not know.</summary>
        UnknownFrame = 5,
        /// <summary>An input that is not a message its Actor takes.</summary>
        BadInput = 6,
        /// <summary>Frames in an order the protocol does not allow, or another version.</summary>
        Protocol = 7,
        /// <summary>Faster than rate_per_second with bursts of rate_burst.</summary>
        RateLimited = 8,
        /// <summary>More than max_held inputs held while Actors moved.</summary>
        TooManyHeld = 9,
        /// <summary>A move did not end in time, or a push went missing.</summary>
        SealTimeout = 10,
        /// <summary>The client read too slowly.</summary>
        SlowReader = 11,
        /// <summary>The gateway could not go on.</summary>
        Internal = 12,
    }

    /// <summary>The close codes' names on the wire, and which of them a client recovers from.</summary>
    public static class CloseCodes
    {
        /// <summary>A WebSocket close status is this plus the code.</summary>
        public const int WebSocketBase = 4000;

        static readonly string[] Names =
        {
            "normal", "shutdown", "unauthenticated", "malformed", "too_large", "unknown_frame", "bad_input",
            "protocol", "rate_limited", "too_many_held", "seal_timeout", "slow_reader", "internal",
        };

        /// <summary>The code's name in frames (`seal_timeout`).</summary>
        public static string Name(CloseCode code)
        {
            return Names[(int)code];
        }

        /// <summary>The code a name in a frame stands for.</summary>
        public static bool TryParse(string name, out CloseCode code)
        {
            int index = Array.IndexOf(Names, name);
            code = (CloseCode)Math.Max(index, 0);
            return index >= 0;
        }

        /// <summary>The code of a WebSocket close status, or null for a status outside the protocol's.</summary>
        public static CloseCode? FromStatus(int status)
        {
            int n = status - WebSocketBase;
            return n >= 0 && n < Names.Length ? (CloseCode?)n : null;
        }

        /// <summary>Whether a session ended so is worth connecting again for: the server's reasons, not the client's.</summary>
        public static bool IsRetryable(CloseCode code)
        {
            return code == CloseCode.Shutdown || code == CloseCode.SealTimeout ||
                   code == CloseCode.SlowReader || code == CloseCode.Internal;
        }
    }

    /// <summary>The limits a gateway announces in its welcome.</summary>
    public sealed class Limits
    {
        /// <summary>The largest frame (a JSON message's text) the gateway takes.</summary>
        public long MaxFrame { get; internal set; }
        /// <summary>Frames per second on average.</summary>
        public long RatePerSecond { get; internal set; }
        /// <summary>Frames in one burst above that.</summary>
        public long RateBurst { get; internal set; }
    }

    /// <summary>One frame from a gateway, as read; which fields are set depends on <see cref="Type"/>.</summary>
    internal sealed class ServerFrame
    {
        public string Type;
        public string Actor;
        public string Reason;
        public long Seq;
        public long Inputs;
        /// <summary>A push's message as its JSON text.</summary>
        public string Message;
        public CloseCode Code;
        public bool Retryable;
        public string Session;
        public string Node;
        public Limits Limits;
    }

    /// <summary>Reads the gateway's frames and writes the client's.</summary>
    internal static class Protocol
    {
        /// <summary>The protocol version this client speaks: 2 adds `delivered`, 3 `undelivered`.</summary>
        public const int Version = 3;

        /// <summary>
        /// Reads one gateway frame. A frame that is not JSON, lacks a field its type needs, or has a type this
        /// client does not know is refused with the reason, and ends the session (the next gateway would send the
        /// same, so the client is what needs updating).
        /// </summary>
        public static bool TryRead(string text, out ServerFrame frame, out string error)
        {
            frame = null;
            try
            {
                frame = Read(Json.Parse(text));
                error = null;
                return true;
            }
            catch (FormatException e)
            {
                error = "the gateway sent a frame this client cannot read (" + e.Message + "); update the client";
                return false;
            }
        }

        static ServerFrame Read(JsonValue json)
        {
            if (json.Kind != JsonKind.Object) throw new FormatException("a frame must be a JSON object");
            var frame = new ServerFrame { Type = Text(json, "type", "a frame") };
            switch (frame.Type)
            {
                case "welcome":
                    frame.Session = Text(json, "session", frame.Type);
                    frame.Node = Text(json, "node", frame.Type);
                    JsonValue limits = json.Member("limits");
                    if (limits == null || limits.Kind != JsonKind.Object)
                        throw new FormatException("a `welcome` frame needs `limits`, an object");
                    frame.Limits = new Limits
                    {
                        MaxFrame = Count(limits, "max_frame", "limits"),
                        RatePerSecond = Count(limits, "rate_per_second", "limits"),
                        RateBurst = Count(limits, "rate_burst", "limits"),
                    };
                    break;
                case "bound":
                    frame.Actor = Text(json, "actor", frame.Type);
                    break;
                case "bind_refused":
                case "unbound":
                    frame.Actor = Text(json, "actor", frame.Type);
                    frame.Reason = Text(json, "reason", frame.Type);
                    break;
                case "push":
                    frame.Actor = Text(json, "actor", frame.Type);
                    frame.Seq = Count(json, "seq", frame.Type);
                    JsonValue message = json.Member("message");
                    if (message == null) throw new FormatException("a `push` frame needs `message`");
                    frame.Message = message.Raw;
                    break;
                case "delivered":
                case "undelivered":
                    frame.Actor = Text(json, "actor", frame.Type);
                    frame.Inputs = Count(json, "inputs", frame.Type);
                    break;
                case "closing":
                    string code = Text(json, "code", frame.Type);
                    if (!CloseCodes.TryParse(code, out frame.Code))
                        throw new FormatException("a `closing` frame has the unknown code \"" + code + "\"");
                    JsonValue retryable = json.Member("retryable");
                    if (retryable == null || retryable.Kind != JsonKind.Bool)
                        throw new FormatException("a `closing` frame needs `retryable`, true or false");
                    frame.Retryable = retryable.Bool;
                    frame.Reason = Text(json, "reason", frame.Type);
                    break;
                default:
                    throw new FormatException("the frame type \"" + frame.Type + "\" is unknown");
            }
            return frame;
        }

        static string Text(JsonValue json, string field, string what)
        {
            JsonValue value = json.Member(field);
            if (value == null || value.Kind != JsonKind.String)
                throw new FormatException(Needs(what, field, "a string"));
            return value.String;
        }

        static long Count(JsonValue json, string field, string what)
        {
            JsonValue value = json.Member(field);
            long count;
            if (value == null || !value.TryGetCount(out count))
                throw new FormatException(Needs(what, field, "a whole number of 0 or more"));
            return count;
        }

        static string Needs(string what, string field, string kind)
        {
            return (what == "a frame" || what == "limits" ? what : "a `" + what + "` frame") + " needs `" + field + "`, " + kind;
        }

        /// <summary>
        /// Whether a connection closed with <paramref name="code"/> (null: a status outside the protocol's, or none)
        /// and no `closing` frame before it is worth connecting again for.
        /// </summary>
        public static bool RetryableClose(CloseCode? code)
        {
            return code == null || CloseCodes.IsRetryable(code.Value);
        }

        public static string Hello(string token)
        {
            return "{\"type\":\"hello\",\"version\":" + Version + ",\"token\":" + Json.Quote(token) + "}";
        }

        public static string Bind(string actor)
        {
            return "{\"type\":\"bind\",\"actor\":" + Json.Quote(actor) + "}";
        }

        public static string Unbind(string actor)
        {
            return "{\"type\":\"unbind\",\"actor\":" + Json.Quote(actor) + "}";
        }

        /// <summary>An input; <paramref name="message"/> is JSON text, already checked.</summary>
        public static string Input(string actor, string message)
        {
            return "{\"type\":\"input\",\"actor\":" + Json.Quote(actor) + ",\"message\":" + message + "}";
        }

        public const string Bye = "{\"type\":\"bye\"}";
    }
}
